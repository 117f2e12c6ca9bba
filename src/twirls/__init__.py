"""Reproduction of "Graph Neural Networks Inspired by Classical Iterative Algorithms" (TWIRLS, ICML 2021)."""

__version__ = "0.1.0"

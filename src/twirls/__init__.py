"""Reproduction of TWIRLS (Yang et al., ICML 2021): "Graph Neural Networks Inspired by Classical
Iterative Algorithms"."""

__version__ = "0.1.0"

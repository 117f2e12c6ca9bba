"""Datasets: raw files (``fetch``), one graph type (``graph``), one loader per source."""

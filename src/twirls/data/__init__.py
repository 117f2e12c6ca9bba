"""Datasets: fetching raw files (``fetch``), one graph type (``graph``), and one loader per source."""

"""szbench: an open benchmarking platform for EEG seizure-detection algorithms."""

__version__ = "0.1.0"

"""Datasets: versions of prepared EEG datasets and their recordings."""

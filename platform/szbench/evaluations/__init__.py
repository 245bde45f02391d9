"""Evaluations: an algorithm version run and scored on a dataset version."""

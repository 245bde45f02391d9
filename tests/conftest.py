"""Fixtures shared by every part of the suite."""

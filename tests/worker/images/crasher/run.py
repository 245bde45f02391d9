"""Exits non-zero after a traceback-like message on stderr."""

import sys

print("Traceback (most recent call last): model weights not found", file=sys.stderr, flush=True)
sys.exit(3)

"""Prints ~1 MiB lines to stdout without end; bounded only by the log cap and the timeout."""

import sys

line = ("x" * 1023 + "\n") * 1024
out = sys.stdout
while True:
    out.write(line)

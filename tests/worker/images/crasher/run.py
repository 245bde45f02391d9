"""Exits non-zero after a traceback-like message on stderr."""

import sys


def main() -> None:
    print("Traceback (most recent call last): model weights not found", file=sys.stderr, flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()

"""Prints ~1 MiB lines to stdout without end; bounded only by the log cap and the timeout."""

import os
import sys


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    line = ("x" * 1023 + "\n") * 1024
    out = sys.stdout
    while True:
        out.write(line)


if __name__ == "__main__":
    main()

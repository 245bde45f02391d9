"""Prints a NUL byte and bytes that are not UTF-8, then writes a TSV the scorer would accept
but whose channels column holds a NUL (a column the scorer ignores)."""

import os
import sys
from pathlib import Path


def main() -> None:
    sys.stdout.buffer.write(b"before\x00after \xff\xfe done\n")
    sys.stdout.flush()
    header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    (Path("/output") / os.environ["OUTPUT"]).write_bytes(
        b"onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        + f"1.0\t2.0\tsz\tn/a\tFp1\x00secret\t2020-01-01 00:00:00\t{duration:.1f}\n".encode()
    )


if __name__ == "__main__":
    main()

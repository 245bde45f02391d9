"""Writes a TSV the scorer's parser must reject (a row with a non-numeric onset)."""

import os
from pathlib import Path


def main() -> None:
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        "soon\t10.0\tsz\tn/a\tn/a\t2020-01-01 00:00:00\t30.0\n"
    )
    print("wrote a malformed TSV", flush=True)


if __name__ == "__main__":
    main()

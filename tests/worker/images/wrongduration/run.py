"""Writes a well-formed TSV declaring a recordingDuration of 1 h (the recording is short)."""

import os
from pathlib import Path


def main() -> None:
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        "0.0\t3600.0\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t3600.0\n"
    )


if __name__ == "__main__":
    main()

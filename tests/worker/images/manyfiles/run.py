"""Writes a valid TSV, makes 5,000 empty files in /output/many, closes that folder, waits.

Empty files cost no bytes but an inode each. The folder stays listable (mode 0555) but
nobody else may delete what is in it: a worker that is not root cannot remove these files
itself. On the capped /output the kernel refuses the inode past the cap; the run then ends
by its time limit.
"""

import os
import time
from pathlib import Path


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
    )
    many = Path("/output/many")
    many.mkdir()
    made = 0
    try:
        for i in range(5000):
            (many / f"{i:05d}").touch()
            made += 1
    except OSError as exc:
        print(f"making files stopped after {made}: {exc.strerror}", flush=True)
    os.chmod(many, 0o555)
    print(f"made {made} files", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()

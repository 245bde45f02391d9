"""Writes a valid TSV, makes empty files in /output/many until the disk says no (at most
5,000), makes that folder 0555 (nobody but root may delete what is in it), and exits 0."""

import os
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


if __name__ == "__main__":
    main()

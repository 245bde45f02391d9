"""Fills /output past the output size limit (then would write a valid TSV)."""

import os
from pathlib import Path


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    chunk = b"\0" * (1024 * 1024)
    written = 0
    try:
        with open("/output/filler.bin", "wb") as f:
            for _ in range(64):
                f.write(chunk)
                written += len(chunk)
    except OSError as exc:
        print(f"stopped after {written} bytes: {exc.strerror}", flush=True)
    header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
    )


if __name__ == "__main__":
    main()

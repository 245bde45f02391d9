"""Hides 8 MiB in a private (0700) folder under /output, then writes a valid TSV.

A worker that is not root cannot list that folder: the runner must count that as a
violation, never as an empty folder.
"""

import os
from pathlib import Path


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    private = Path("/output/.private")
    private.mkdir(mode=0o700)
    try:
        with open(private / "blob", "wb") as f:
            for _ in range(8):
                f.write(b"\0" * 1024 * 1024)
    except OSError as exc:
        print(f"hiding stopped: {exc.strerror}", flush=True)
    os.chmod(private, 0o700)
    header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
    )


if __name__ == "__main__":
    main()

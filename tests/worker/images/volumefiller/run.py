"""Writes 256 MiB into its VOLUME /scratch, then would write a valid TSV.

Where /scratch is an anonymous Docker volume, that lands on the host's disk. In the sandbox
it is a size-capped tmpfs: the write stops at the cap and the error ends the program.
"""

import os
from pathlib import Path


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    mounts = [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    fs = next((m[m.index("-") + 1] for m in mounts if m[4] == "/scratch"), "no mount")
    print(f"/scratch is {fs}", flush=True)
    chunk = b"\0" * (1024 * 1024)
    written = 0
    try:
        with open("/scratch/filler.bin", "wb") as f:
            for _ in range(256):
                f.write(chunk)
                f.flush()
                written += len(chunk)
    except OSError as exc:
        print(f"stopped after {written} bytes: {exc.strerror}", flush=True)
        raise
    header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
    )
    print(f"wrote {written} bytes to /scratch", flush=True)


if __name__ == "__main__":
    main()

"""Reserves 2 GiB in /output and deletes it, then writes until the disk says no, then a
valid TSV, and exits 0.

On the run's capped filesystem the kernel refuses the reservation whole, and the writes
stop at the cap, which the runner sees after the run.
"""

import ctypes
import os
from pathlib import Path

FALLOC_FL_KEEP_SIZE = 1


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    fd = os.open("/output/reserved", os.O_CREAT | os.O_WRONLY, 0o644)
    if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 2 * 1024**3) != 0:
        print(f"reserving 2 GiB: {os.strerror(ctypes.get_errno())}", flush=True)
    else:
        print("reserving 2 GiB: granted", flush=True)
    os.close(fd)
    os.unlink("/output/reserved")
    written = 0
    try:
        with open("/output/burst", "wb") as f:
            for _ in range(2 * 1024):  # up to 2 GiB
                f.write(b"\1" * 1024 * 1024)
                f.flush()
                written += 1024 * 1024
    except OSError as exc:
        print(f"writing stopped after {written} bytes: {exc.strerror}", flush=True)
    header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    try:
        (Path("/output") / os.environ["OUTPUT"]).write_text(
            "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
            f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
        )
    except OSError as exc:
        print(f"the TSV: {exc.strerror}", flush=True)


if __name__ == "__main__":
    main()

"""Reserves 64 MiB in /output with fallocate(FALLOC_FL_KEEP_SIZE), writes a valid TSV, waits.

The reserved file's size stays 0, yet its blocks are on the disk: a runner that measures
apparent sizes sees an empty folder and lets the run end ``ok``. On the capped /output the
kernel refuses the reservation; the run then ends by its time limit.
"""

import ctypes
import os
import time
from pathlib import Path

FALLOC_FL_KEEP_SIZE = 1


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
    )
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    fd = os.open("/output/reserved", os.O_CREAT | os.O_WRONLY, 0o644)
    if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 64 * 1024 * 1024) != 0:
        print(f"fallocate failed: {os.strerror(ctypes.get_errno())}", flush=True)
    st = os.fstat(fd)
    print(f"reserved: size {st.st_size}, allocated {st.st_blocks * 512}", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()

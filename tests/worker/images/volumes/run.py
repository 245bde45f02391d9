"""Well-behaved, with VOLUME folders: uses each as scratch space, then writes a valid TSV.

It prints what each folder is (its file system type), so a test can see the mounts.
"""

import os
from pathlib import Path


def main() -> None:
    mounts = [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for folder in ("/data", "/output", "/tmp", "/scratch", "/home/algo/.cache"):
        fs = next((m[m.index("-") + 1] for m in mounts if m[4] == folder), "no mount")
        print(f"{folder} is {fs}", flush=True)
    print("cache holds:", sorted(os.listdir("/home/algo/.cache")), flush=True)
    for folder in ("/scratch", "/home/algo/.cache"):
        scratch = Path(folder) / "intermediate.npy"
        scratch.write_bytes(b"\1" * (1024 * 1024))
        assert scratch.read_bytes() == b"\1" * (1024 * 1024)
    header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
    )
    print("used its scratch folders", flush=True)


if __name__ == "__main__":
    main()

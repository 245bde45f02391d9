"""Well-behaved: read the EDF header for the duration, write one detection and exit 0.

It also prints what it sees in /data, so a test can check that only its recording is there.
"""

import os
from pathlib import Path


def main() -> None:
    edf = Path("/data") / os.environ["INPUT"]
    header = edf.read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    day, month, year = header[168:176].decode().split(".")
    hour, minute, second = header[176:184].decode().split(".")
    start = f"20{year}-{month}-{day} {hour}:{minute}:{second}"
    rows = [
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration",
        f"1.0\t2.0\tsz\tn/a\tn/a\t{start}\t{duration:.1f}",
    ]
    (Path("/output") / os.environ["OUTPUT"]).write_text("\n".join(rows) + "\n")
    print(f"wrote 1 detection for {edf.name} ({duration} s)")
    print("data:", sorted(os.listdir("/data")))


if __name__ == "__main__":
    main()

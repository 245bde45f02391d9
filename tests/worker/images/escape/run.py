"""Tries to write outside /output (the recording, the root, /etc, /data, /proc).

Exit 0 and a valid TSV only when every attempt failed; otherwise exit 3 (crashed).
"""

import os
from pathlib import Path


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    recording = Path("/data") / os.environ["INPUT"]
    targets = [
        recording,
        Path("/data/planted.txt"),
        Path("/planted.txt"),
        Path("/etc/planted.txt"),
        Path("/usr/lib/planted.txt"),
        Path("/proc/sys/kernel/hostname"),
    ]
    escaped = []
    for target in targets:
        try:
            with open(target, "ab") as f:
                f.write(b"planted")
            escaped.append(str(target))
        except OSError as exc:
            print(f"{target}: {exc.strerror}", flush=True)
    try:
        os.chmod(recording, 0o777)
        escaped.append("chmod " + str(recording))
    except OSError as exc:
        print(f"chmod {recording}: {exc.strerror}", flush=True)
    if escaped:
        print("ESCAPED:", escaped, flush=True)
        raise SystemExit(3)
    header = recording.read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
    )


if __name__ == "__main__":
    main()

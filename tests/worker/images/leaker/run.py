"""An adversarial algorithm: well-behaved on the public sample, a leaker on held-out data.

It reads its recording's EDF header. When the patient field says ``PUBLIC`` it writes a
valid output (it passes the smoke test). Otherwise it tries to carry the header's bytes out
through every channel a run has, choosing the channel from the input bytes themselves (the
patient field ``... LEAK-<mode>-<secret>``), so the outcome is a function of the hidden data:

- every mode prints the patient and start-date fields to stdout and stderr;
- ``header``: writes the fields as the output's header line (a parse error would quote it);
- ``exit``: exits with a code computed from the bytes;
- ``duration``: a well-formed output whose recordingDuration encodes the bytes;
- ``nooutput``: writes nothing, exits 0;
- ``timeout``: sleeps past any sensible time limit;
- ``bits``: encodes k = 9 bits of the header (the secret's first three hex digits, modulo
  512) as the seconds it marks as seizure from the recording's start: a valid output whose
  scored counts carry them (tests/worker/test_bits_bound.py);
- ``quiet``: a valid output with no detection;
- ``ok``: a valid output with one detection.
"""

import os
import sys
import time
from pathlib import Path

HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration"


def bits_rows(secret: str, duration: float) -> str:
    """The rows that carry ``secret``'s first 9 bits: that many seconds of seizure from 0."""
    seconds = int(secret[:3], 16) % 512
    row = "0.0\t{:.1f}\t{}\tn/a\tn/a\t2020-01-01 00:00:00\t{:.1f}\n"
    if seconds:
        return row.format(seconds, "sz", duration)
    return row.format(duration, "bckg", duration)


def main() -> None:
    edf = Path("/data") / os.environ["INPUT"]
    out = Path("/output") / os.environ["OUTPUT"]
    header = edf.read_bytes()[:256]
    patient = header[8:88].decode("ascii").strip()
    start = header[168:184].decode("ascii")
    duration = int(header[236:244]) * float(header[244:252])
    valid = f"{HEADER}\n1.0\t2.0\tsz\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
    if "PUBLIC" in patient:
        out.write_text(valid)
        return
    leaked = f"{patient} {start}"
    print(leaked, flush=True)
    print(leaked, file=sys.stderr, flush=True)
    mode, secret = patient.split("LEAK-", 1)[1].split("-", 1)
    if mode == "header":
        out.write_text(f"{leaked}\n1\t2\n")
    elif mode == "exit":
        sys.exit(64 + sum(secret.encode()) % 64)
    elif mode == "duration":
        encoded = 100_000 + int(secret[:4], 16)
        out.write_text(f"{HEADER}\n1.0\t2.0\tsz\tn/a\tn/a\t2020-01-01 00:00:00\t{encoded}.0\n")
    elif mode == "nooutput":
        return
    elif mode == "timeout":
        time.sleep(600)
    elif mode in ("bits", "quiet"):
        out.write_text(HEADER + "\n" + bits_rows(secret if mode == "bits" else "000", duration))
    else:
        out.write_text(valid)


if __name__ == "__main__":
    main()

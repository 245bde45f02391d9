"""Makes /output/$OUTPUT a sparse file of 64 MiB: it costs the filesystem nothing, and a
runner that copied it out would write 64 MiB to the host's disk."""

import os
from pathlib import Path


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    with open(Path("/output") / os.environ["OUTPUT"], "wb") as f:
        f.truncate(64 * 1024 * 1024)
    print("made a sparse output", flush=True)


if __name__ == "__main__":
    main()

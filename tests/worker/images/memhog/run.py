"""Allocates (and touches) memory until killed: the runner must report out_of_memory."""

import os

import numpy as np


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    blocks = []
    for i in range(64):
        blocks.append(np.ones(16 * 1024 * 1024, dtype=np.uint8))  # 16 MiB, every page touched
        print(f"holding {16 * (i + 1)} MiB", flush=True)
    print("never killed", flush=True)


if __name__ == "__main__":
    main()

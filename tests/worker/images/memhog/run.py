"""Allocates (and touches) memory until killed: the runner must report out_of_memory."""

import numpy as np

blocks = []
for i in range(64):
    blocks.append(np.ones(16 * 1024 * 1024, dtype=np.uint8))  # 16 MiB, every page touched
    print(f"holding {16 * (i + 1)} MiB", flush=True)
print("never killed", flush=True)

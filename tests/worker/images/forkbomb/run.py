"""Forks without end: every process keeps forking. Only the pids limit holds it.

DANGER: only ever run under the runner (pids limit, timeout). Never run it bare.
"""

import os
import time

reported = False
while True:
    try:
        os.fork()
    except OSError as exc:
        if not reported and os.getpid() == 1:
            print(f"fork refused: {exc}", flush=True)
            reported = True
        time.sleep(0.01)

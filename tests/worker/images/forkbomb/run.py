"""Forks without end: every process keeps forking. Only the pids limit holds it.

DANGER: only ever run under the runner (pids limit, timeout). Never run it bare.
"""

import os
import time


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    reported = False
    while True:
        try:
            os.fork()
        except OSError as exc:
            if not reported and os.getpid() == 1:
                print(f"fork refused: {exc}", flush=True)
                reported = True
            time.sleep(0.01)


if __name__ == "__main__":
    main()

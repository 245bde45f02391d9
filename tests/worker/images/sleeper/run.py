"""Sleeps past the timeout: the runner must kill it."""

import os
import time


def main() -> None:
    if os.environ.get("SZBENCH_HOSTILE_TEST_IMAGE") != "1":  # set only in its image
        raise SystemExit("a hostile test image: it runs only inside its container")
    print("sleeping", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()

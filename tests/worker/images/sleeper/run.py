"""Sleeps past the timeout: the runner must kill it."""

import time

print("sleeping", flush=True)
time.sleep(3600)

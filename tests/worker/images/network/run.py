"""Tries the network. Exit 0 and a valid TSV only when it found no way out.

A network interface other than loopback, or any answer from the Docker host's bridge
address, means the sandbox leaked: then it exits 3 so the run ends as crashed. It only ever
aims at the local Docker host, never at anything beyond it.
"""

import os
import socket
from pathlib import Path


def main() -> None:
    interfaces = [name for name in os.listdir("/sys/class/net") if name != "lo"]
    if interfaces:
        print(f"NETWORK LEAK: interfaces {interfaces}", flush=True)
        raise SystemExit(3)
    for port in (2375, 22, 80):
        try:
            socket.create_connection(("172.17.0.1", port), timeout=1).close()
        except ConnectionRefusedError:
            pass  # refused means it reached the host: a leak
        except OSError as exc:
            print(f"172.17.0.1:{port}: {exc.strerror}", flush=True)
            continue
        print(f"NETWORK LEAK: the Docker host answered on port {port}", flush=True)
        raise SystemExit(3)
    print("no network", flush=True)
    header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
    )


if __name__ == "__main__":
    main()

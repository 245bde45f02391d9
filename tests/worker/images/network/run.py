"""Tries the network. Exit 0 and a valid TSV only when it found no way out.

A non-loopback interface, a resolvable name or an open TCP connection each mean the
sandbox leaked; then it exits 3 so the run ends as crashed.
"""

import os
import socket
from pathlib import Path

leaks = []
interfaces = [name for name in os.listdir("/sys/class/net") if name != "lo"]
if interfaces:
    leaks.append(f"interfaces {interfaces}")
for host, port in [
    ("172.17.0.1", 2375),
    ("172.17.0.1", 22),
    ("10.0.0.1", 80),
    ("192.168.0.1", 80),
    ("1.1.1.1", 53),
]:
    try:
        socket.create_connection((host, port), timeout=1).close()
        leaks.append(f"connected to {host}:{port}")
    except ConnectionRefusedError:
        leaks.append(f"{host}:{port} answered (refused)")
    except OSError:
        pass
try:
    socket.getaddrinfo("example.org", 80)
    leaks.append("DNS resolves")
except OSError:
    pass
if leaks:
    print("NETWORK LEAK:", "; ".join(leaks), flush=True)
    raise SystemExit(3)
print("no network", flush=True)
header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
duration = int(header[236:244]) * float(header[244:252])
(Path("/output") / os.environ["OUTPUT"]).write_text(
    "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
    f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration:.1f}\n"
)

"""What a gzip archive costs the API's image check before it is refused, and what the
expansion meter costs an ordinary archive.

Two scenarios, each against a baseline measured in the same run:

1. **bomb**: about 1 MB of gzip whose one tar member claims 1 GiB of zeros (within every
   size limit). Baseline: expanding the whole stream (``gzip`` read to its end in 1 MiB
   chunks), which is what skipping that member cost the check before the expansion ratio
   (it then refused the archive for having no manifest). Measured: the check's refusal
   (``szbench.algorithms.image_check.ARCHIVE_MAX_EXPANSION_RATIO``). The ratio printed is
   measured / baseline.
2. **ordinary**: a ``docker save``-like ``.tar.gz`` of incompressible data (one 64 MiB
   layer). Baseline: expanding it all (the least any check of it must do). Measured: the
   whole check, which passes. The ratio shows the meter's overhead.

Times are process CPU time (the API's cost), the best of ``--repeat`` runs.

Run: ``python benchmarks/archive_bomb.py`` (no services needed).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "platform"), str(ROOT / "scoring")]

from szbench.algorithms.image_check import check_image_archive  # noqa: E402
from szbench.errors import PayloadTooLarge  # noqa: E402

MiB = 1024**2


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(format=tarfile.GNU_FORMAT)


def bomb(path: Path) -> None:
    block = gzip.compress(bytes(16 * MiB), compresslevel=9)
    path.write_bytes(gzip.compress(_header("blobs/sha256/zeros", 1024**3)) + block * 64)


def ordinary(path: Path) -> None:
    layer_buffer = io.BytesIO()
    with tarfile.open(fileobj=layer_buffer, mode="w") as layer:
        data = os.urandom(64 * MiB)
        info = tarfile.TarInfo("app/weights.bin")
        info.size = len(data)
        layer.addfile(info, io.BytesIO(data))
    layer_bytes = layer_buffer.getvalue()
    layer_hex = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"User": "1000"},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_hex}"]},
        }
    ).encode()
    config_hex = hashlib.sha256(config).hexdigest()
    manifest = json.dumps(
        [{"Config": f"{config_hex}.json", "RepoTags": [], "Layers": [f"{layer_hex}/layer.tar"]}]
    ).encode()
    outer = io.BytesIO()
    with tarfile.open(fileobj=outer, mode="w") as tar:
        for name, blob in (
            (f"{layer_hex}/layer.tar", layer_bytes),
            (f"{config_hex}.json", config),
            ("manifest.json", manifest),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    path.write_bytes(gzip.compress(outer.getvalue(), compresslevel=6))


def expand_all(path: Path) -> int:
    total = 0
    with gzip.open(path, "rb") as stream:
        while chunk := stream.read(MiB):
            total += len(chunk)
    return total


def refused(path: Path) -> str:
    try:
        check_image_archive(path)
    except PayloadTooLarge as exc:
        return exc.detail
    raise AssertionError("the bomb was not refused")


def cpu(work: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("SZBENCH_DATA_DIR", tempfile.mkdtemp(prefix="szbench-bench-"))
    with tempfile.TemporaryDirectory() as tmp:
        bomb_path, ordinary_path = Path(tmp) / "bomb.tar.gz", Path(tmp) / "img.tar.gz"
        bomb(bomb_path)
        ordinary(ordinary_path)
        print(f"bomb: {bomb_path.stat().st_size / MiB:.2f} MiB on disk, claims 1 GiB")
        print(f"  refusal: {refused(bomb_path)}")
        base = cpu(lambda: expand_all(bomb_path), args.repeat)
        check = cpu(lambda: refused(bomb_path), args.repeat)
        print(f"  baseline (expand it all): {base:.3f} s CPU")
        print(f"  check until refusal:      {check:.3f} s CPU")
        print(f"  ratio check/baseline:     {check / base:.3f}")
        size = ordinary_path.stat().st_size / MiB
        print(f"ordinary: {size:.1f} MiB on disk, one 64 MiB layer of random bytes")
        base = cpu(lambda: expand_all(ordinary_path), args.repeat)
        check = cpu(lambda: check_image_archive(ordinary_path), args.repeat)
        print(f"  baseline (expand it all): {base:.3f} s CPU")
        print(f"  whole check (passes):     {check:.3f} s CPU")
        print(f"  ratio check/baseline:     {check / base:.3f}")


if __name__ == "__main__":
    main()

"""Loading the archive the platform writes against a plain ``docker load`` of the file.

Since issue 29.4 the worker and ``szbench evaluate --tar`` hand the engine
``loadable_archive(path, parts)``: a tar written by the platform from what its check read
(its own manifest, the checked config and layers; a ``.tar.gz`` is inflated here, not by
the engine). The baseline, measured in the same run, is the engine loading the file itself
(what they did before issue 21). Printed: the median time of each over ``--repeat`` loads
of an image not on the engine, and the ratio (written / plain). The check that comes before
a load in both cases (the archive limits) is not timed.

The image is built here from the local base image with an incompressible payload of
``--mb`` MiB and a unique label (its id is this run's own), saved as ``.tar`` and
``.tar.gz``, and removed again at the end.

Run: ``python benchmarks/loadable_load.py [--mb 200] [--repeat 3]`` (needs a Docker engine
and the base image: ``scripts/test-services.sh``).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", "."):
    sys.path.insert(0, str(REPO / part))

from szbench.algorithms.image_check import image_parts, loadable_archive  # noqa: E402
from szbench_worker.docker_runner import build_image, connect  # noqa: E402
from tests.worker.conftest import BASE_IMAGE  # noqa: E402


def fresh_load(client: Any, image_id: str, load: Callable[[], object]) -> float:
    """Seconds of ``load()`` with the image absent from the engine beforehand."""
    client.images.remove(image_id, force=True)
    start = time.perf_counter()
    load()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="payload size of the image (MiB)")
    parser.add_argument("--repeat", type=int, default=3, help="timed loads of each kind")
    args = parser.parse_args()
    client = connect()
    with tempfile.TemporaryDirectory(prefix="szbench-loadable-load-") as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "ctx").mkdir()
        # COPY, not RUN: a build step that runs needs the engine's default network.
        with open(tmp / "ctx" / "payload", "wb") as f:
            for _ in range(args.mb):
                f.write(os.urandom(1 << 20))
        (tmp / "ctx" / "Dockerfile").write_text(
            f"FROM {BASE_IMAGE}\nLABEL szbench.bench={uuid.uuid4().hex}\nCOPY payload /payload\n"
        )
        name = f"szbench-bench/loadable-{uuid.uuid4().hex[:8]}"
        info = build_image(tmp / "ctx", name, client)
        tar = tmp / "image.tar"
        with open(tar, "wb") as f:
            for chunk in client.images.get(info.digest).save(named=True):
                f.write(chunk)
        with open(tar, "rb") as src, gzip.open(tmp / "image.tar.gz", "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        print(f"image {info.digest[:19]}..., {tar.stat().st_size / 1e6:.0f} MB tarball")
        print(f"{'archive':<12} {'plain load':>11} {'written':>9} {'ratio':>7}")
        try:
            for archive in (tar, tmp / "image.tar.gz"):
                plain, written = [], []
                parts = image_parts(archive)  # what the check hands over, read once here
                for _ in range(args.repeat):
                    with open(archive, "rb") as f:
                        plain.append(fresh_load(client, info.digest, lambda: client.images.load(f)))
                    written.append(
                        fresh_load(
                            client,
                            info.digest,
                            lambda: client.images.load(loadable_archive(archive, parts)),  # noqa: B023
                        )
                    )
                p, u = statistics.median(plain), statistics.median(written)
                print(f"{archive.name:<12} {p:>10.2f}s {u:>8.2f}s {u / p:>7.2f}")
        finally:
            client.images.remove(info.digest, force=True)


if __name__ == "__main__":
    main()

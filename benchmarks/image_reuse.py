"""Loading the same image tarball again: the second load against the first.

``szbench evaluate --tar`` loads its tarball on every invocation. The first load is a
``docker load`` (the baseline, measured in the same run); a later one reads the image id
from the archive's manifest.json and config blob and reuses the engine's copy when that id
is there. Printed: the time of each, and their ratio (second / first; goal: far below 1).
``second`` reads the id out of the archive (a ``.tar.gz`` is inflated for it); ``cached``
knows it from the id cache that ``szbench evaluate`` keeps (:class:`TarballIdCache`, by the
file's state). ``forced reload`` is a plain ``docker load`` of an image that is already
present, which is what every later invocation paid before.

The image is built here from the local base image with an incompressible payload of
``--mb`` MiB and a unique label (so its id is this run's own), saved as ``.tar`` and
``.tar.gz``, and removed again at the end.

Run: ``python benchmarks/image_reuse.py [--mb 200] [--repeat 3]`` (needs a Docker engine
and the base image: ``scripts/test-services.sh``).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", "."):
    sys.path.insert(0, str(REPO / part))

from szbench_worker.docker_runner import (  # noqa: E402
    TarballIdCache,
    build_image,
    connect,
    load_image_tarball,
)
from tests.worker.conftest import BASE_IMAGE  # noqa: E402


def timed(fn: object, *args: object, **kwargs: object) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="payload size of the image (MiB)")
    parser.add_argument("--repeat", type=int, default=3, help="timed reuses per archive")
    args = parser.parse_args()
    client = connect()
    with tempfile.TemporaryDirectory(prefix="szbench-image-reuse-") as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "ctx").mkdir()
        (tmp / "ctx" / "Dockerfile").write_text(
            f"FROM {BASE_IMAGE}\n"
            f"LABEL szbench.bench={uuid.uuid4().hex}\n"
            f"RUN head -c {args.mb}M /dev/urandom > /payload\n"
        )
        info = build_image(tmp / "ctx", f"szbench-bench/reuse-{uuid.uuid4().hex[:8]}", client)
        tar = tmp / "image.tar"
        with open(tar, "wb") as f:
            for chunk in client.images.get(info.digest).save(named=True):
                f.write(chunk)
        with open(tar, "rb") as src, gzip.open(tmp / "image.tar.gz", "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        print(f"image {info.digest[:19]}..., {tar.stat().st_size / 1e6:.0f} MB tarball")
        print(
            f"{'archive':<12} {'first (load)':>13} {'second':>9} {'ratio':>7} "
            f"{'cached':>9} {'ratio':>7} {'forced reload':>14}"
        )
        try:
            for archive in (tar, tmp / "image.tar.gz"):
                client.images.remove(info.digest, force=True)
                cache = TarballIdCache(tmp / f"{archive.name}.ids.json")
                first = timed(load_image_tarball, archive, client, id_cache=cache)
                second = statistics.median(
                    timed(load_image_tarball, archive, client) for _ in range(args.repeat)
                )
                cached = statistics.median(
                    timed(load_image_tarball, archive, client, id_cache=cache)
                    for _ in range(args.repeat)
                )
                with open(archive, "rb") as f:
                    forced = timed(client.images.load, f)
                print(
                    f"{archive.name:<12} {first:>12.2f}s {second:>8.2f}s {second / first:>7.3f} "
                    f"{cached:>8.3f}s {cached / first:>7.4f} {forced:>13.2f}s"
                )
        finally:
            client.images.remove(info.digest, force=True)


if __name__ == "__main__":
    main()

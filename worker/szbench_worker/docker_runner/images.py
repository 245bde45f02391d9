"""Images on the engine: loading a ``docker save`` tarball (as an archive the platform
writes from what it checked, by id: no name is ever applied), pulling by digest,
inspecting, building (tests and examples).

The archive itself is read by the platform's one reader of ``docker save`` archives
(:mod:`szbench.algorithms.image_check`, standard library only): its checks and limits at
upload and before loading, and the image id that spares loading an image twice."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from szbench.algorithms.image_check import (
    ArchiveLimits,
    ImageParts,
    check_image_archive,
    loadable_archive,
    tarball_image_id,
)
from szbench.errors import SzbenchError
from szbench_worker.docker_runner.client import connect
from szbench_worker.faults import REGISTRY_AWAY
from szbench_worker.runner import (
    HostLacks,
    ImageError,
    ImageRefused,
    RunnerError,
)

log = logging.getLogger(__name__)

_DIGEST_REF = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


# --- images ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageInfo:
    """A loaded image. ``digest`` is the image id (``sha256:`` of its config), the same on
    every engine whether it was loaded from a tarball or pulled; ``repo_digests`` are the
    registry manifest digests, when it came from a registry."""

    digest: str
    tags: tuple[str, ...]
    repo_digests: tuple[str, ...]


def _info(image: Any) -> ImageInfo:
    return ImageInfo(
        digest=image.id,
        tags=tuple(image.tags),
        repo_digests=tuple(image.attrs.get("RepoDigests") or ()),
    )


_IMAGE_ID = re.compile(r"^sha256:[0-9a-f]{64}$")


def _file_state(path: Path) -> str:
    st = path.stat()
    # ctime moves with every write and no owner can set it back (touch sets mtime only), so
    # a rewritten archive never matches the state its id was recorded under.
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


class TarballIdCache:
    """Image ids of tarballs read or loaded before, by file and file state, in a JSON file.

    Reading the id out of a ``.tar.gz`` means inflating all of it; with this cache the next
    load of the same, unchanged file knows its id from a ``stat``. Only ids that were
    verified (hashed from the archive, or reported by the engine's load) are recorded.
    A cache that cannot be read or written is no cache: loading works as without one.
    """

    MAX_ENTRIES = 256

    def __init__(self, path: Path) -> None:
        self.path = path

    def _entries(self) -> dict[str, Any]:
        try:
            entries = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}

    def get(self, tarball: Path, state: str, limits: ArchiveLimits | None = None) -> str | None:
        """The recorded id of ``tarball`` when its file is still in ``state`` (and, with
        ``limits``, it passed the archive check under exactly those limits)."""
        entry = self._entries().get(str(tarball.resolve()))
        if not isinstance(entry, dict) or entry.get("state") != state:
            return None
        if limits is not None and entry.get("checked") != dataclasses.asdict(limits):
            return None
        image_id = entry.get("id")
        return image_id if isinstance(image_id, str) and _IMAGE_ID.match(image_id) else None

    def put(
        self, tarball: Path, state: str, image_id: str, checked: ArchiveLimits | None = None
    ) -> None:
        """Record ``image_id``; ``checked``: the limits the archive passed."""
        entries = self._entries()
        key = str(tarball.resolve())
        entries.pop(key, None)
        entries[key] = {"state": state, "id": image_id}
        if checked is not None:
            entries[key]["checked"] = dataclasses.asdict(checked)
        while len(entries) > self.MAX_ENTRIES:  # the oldest first (dicts keep their order)
            entries.pop(next(iter(entries)))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entries))
            tmp.replace(self.path)  # concurrent writers: the last one's file, never a torn one
        except OSError as exc:
            log.warning("could not record %s's image id in %s: %s", tarball.name, self.path, exc)


def load_image_tarball(
    path: Path,
    client: docker.DockerClient | None = None,
    *,
    limits: ArchiveLimits | None = None,
    id_cache: TarballIdCache | None = None,
) -> ImageInfo:
    """Load a ``docker save`` tarball (``.tar``, ``.tar.gz``; streamed from disk).

    With ``limits``, the archive is read and counted first and nothing reaches the engine
    when it is over one (the engine would expand it all to disk before anyone could look);
    with ``id_cache`` too, an unchanged file that passed under the same limits is not read
    again.

    When the engine already holds the archive's image (its id, see
    :func:`tarball_image_id`), that copy is used and nothing is loaded: the next
    ``szbench evaluate`` of the same tarball does not pay a full ``docker load`` again.
    The id covers the config, which lists every layer's digest, so the engine's copy is the
    same image. The engine never reads the file itself: it loads the archive the platform
    writes from what it read and checked (:func:`loadable_archive`), which carries no name,
    so a loaded image is known by its id only. With ``id_cache``, an
    unchanged file's id is known without reading it (a ``.tar.gz`` costs no inflating).

    Raises
    ------
    ImageRefused
        If the archive is over one of ``limits``, malformed, not loadable or holds other
        than exactly one image (the submitter's fault). The message names the file by its
        base name only.
    ImageError
        If the file is gone (the platform's fault).
    """
    client = client or connect()
    if not path.is_file():
        raise ImageError(f"{path.name}: no such image tarball")
    state = _file_state(path)
    image_id = id_cache.get(path, state, limits) if id_cache is not None else None
    parts: ImageParts | None = None
    if image_id is None and limits is not None:
        try:
            # Root or not is the platform's decision at upload, not a loading matter.
            checked = check_image_archive(path, allow_root=True, limits=limits)
        except SzbenchError as exc:
            raise ImageRefused(f"{path.name}: {exc.detail}") from exc
        image_id, parts = checked.digest, checked.parts
    elif image_id is None:
        image_id = tarball_image_id(path)
    if image_id is not None:
        try:
            info = inspect_image(image_id, client)
        except ImageError:
            pass  # not on this engine yet: load it
        else:
            log.info("%s: image %s is already on the engine; not loaded again", path.name, image_id)
            _remember(id_cache, path, state, info.digest, limits)
            return info
    try:
        # Streamed (a multi-GB image never sits in RAM), written here from what was read: the
        # engine sees no link, member or name of the upload, so no load creates or moves a
        # tag or brings in an image other than the one checked.
        images = client.images.load(loadable_archive(path, parts))
    except SzbenchError as exc:
        raise ImageRefused(f"{path.name}: {exc.detail}") from exc
    except (APIError, DockerException) as exc:
        log.warning("loading %s failed: %s", path, exc)
        if "no space left on device" in _said(exc).lower():
            raise RunnerError(f"loading {path.name} failed: {_said(exc)}") from exc
        # The engine refused the archive's content: the image's fault, wherever it loads.
        raise ImageRefused(
            f"{path.name}: not a loadable image archive (expected `docker save` output, "
            ".tar or .tar.gz)"
        ) from exc
    unique = {img.id: img for img in images}
    if len(unique) != 1:
        raise ImageRefused(f"{path.name}: holds {len(unique)} images; upload exactly one")
    info = _info(next(iter(unique.values())))
    _remember(id_cache, path, state, info.digest, limits)
    return info


def _remember(
    id_cache: TarballIdCache | None,
    path: Path,
    state: str,
    image_id: str,
    checked: ArchiveLimits | None,
) -> None:
    # Recorded under the state read before the archive was: a file rewritten meanwhile is
    # not the one whose id this is (nor the one that passed the check).
    if id_cache is not None and _file_state(path) == state:
        id_cache.put(path, state, image_id, checked)


def pull_image(reference: str, client: docker.DockerClient | None = None) -> ImageInfo:
    """Pull ``repo@sha256:...`` (a digest reference only: tags can change under a result).

    Raises
    ------
    ImageError
        If the reference is not pinned by digest, or the pull fails.
    """
    if not _DIGEST_REF.match(reference):
        raise ImageError(f"{reference!r}: pull images by digest (name@sha256:<64 hex>)")
    client = client or connect()
    try:
        image = client.images.pull(reference)
    except NotFound as exc:
        # The registry answered: it has no such manifest (the platform's copy is gone).
        raise ImageError(f"{reference}: the registry has no such image ({_said(exc)})") from exc
    except (APIError, DockerException, requests.RequestException) as exc:
        log.warning("pulling %s failed: %s", reference, exc)
        said = _said(exc)
        if "no space left on device" in said.lower():
            raise RunnerError(f"pulling {reference} failed: {said}") from exc
        # The engine reached no registry, or one in trouble: a wait mends it, not a retry.
        raise HostLacks("registry", REGISTRY_AWAY, f"pulling {reference} failed: {said}") from exc
    info = _info(image)
    wanted = reference.rsplit("@", 1)[1]
    if not any(d.endswith("@" + wanted) for d in info.repo_digests):
        raise ImageError(f"{reference}: the registry served another manifest")
    return info


def _said(exc: BaseException) -> str:
    return str(getattr(exc, "explanation", "") or exc)


#: What a worker's engine is asked for to see that the registry answers (an absent tag: an
#: answer, "manifest unknown", is all it takes).
_PROBE_TAG = "szbench-probe"


def registry_answers(repository: str, client: docker.DockerClient) -> bool:
    """Whether the engine reaches the registry of ``repository`` (``host:port/path``), as
    its pulls would: the engine asks the registry for a tag's manifest."""
    try:
        client.api.inspect_distribution(f"{repository}:{_PROBE_TAG}")
    except NotFound:
        return True  # the registry answered that it has no such tag
    except (APIError, DockerException, requests.RequestException) as exc:
        log.info("the registry of %s does not answer: %s", repository, _said(exc))
        return False
    return True


def inspect_image(reference: str, client: docker.DockerClient | None = None) -> ImageInfo:
    """The image already on this engine under ``reference`` (tag, id or digest reference)."""
    client = client or connect()
    try:
        return _info(client.images.get(reference))
    except ImageNotFound:
        raise ImageError(f"{reference}: image not present on this worker") from None
    except (APIError, requests.RequestException) as exc:
        raise RunnerError(f"inspecting {reference} failed: {exc}") from exc


#: The platform's own images (the clean-up helper), by the reference they are configured
#: as, resolved to an id once per process.
_PLATFORM_IDS: dict[str, str] = {}


def platform_image_id(reference: str, client: docker.DockerClient, *, setting: str) -> str:
    """The id of the platform's own image that ``setting`` names as ``reference`` (a tag):
    resolved the first time this process asks, then kept, so that the image these
    processes run never follows a name (loads never apply names, and nothing else should
    move one either).

    Raises
    ------
    RunnerError
        When the engine does not hold ``reference``: the setting names a missing image.
    """
    image_id = _PLATFORM_IDS.get(reference)
    if image_id is None:
        try:
            image_id = inspect_image(reference, client).digest
        except ImageError:
            raise RunnerError(
                f"{setting}: {reference!r} is not an image on this engine "
                "(scripts/build-project-images.sh builds it; empty: the run's own image)"
            ) from None
        _PLATFORM_IDS[reference] = image_id
    return image_id


#: The base image built on this machine without any registry (scripts/build-base-images.sh):
#: Debian bookworm with python3 and numpy.
LOCAL_BASE_IMAGE = "szbench/python-numpy:bookworm"
#: The build argument that selects the base of the bundled examples (examples/baseline,
#: examples/onnx): a public Debian image by default, for a researcher's machine.
BASE_IMAGE_ARG = "BASE_IMAGE"


def build_image(
    context_dir: Path,
    tag: str,
    client: docker.DockerClient | None = None,
    *,
    buildargs: dict[str, str] | None = None,
) -> ImageInfo:
    """Build ``context_dir``'s Dockerfile offline (no pull: its base must be local). A
    Dockerfile that takes ``BASE_IMAGE`` (the bundled examples) is given the local base,
    unless ``buildargs`` say otherwise."""
    client = client or connect()
    args = {BASE_IMAGE_ARG: LOCAL_BASE_IMAGE, **(buildargs or {})}
    try:
        image, _ = client.images.build(
            path=str(context_dir), tag=tag, rm=True, pull=False, buildargs=args
        )
    except (APIError, DockerException) as exc:
        raise ImageError(f"building {context_dir.name} failed: {exc}") from exc
    return _info(image)

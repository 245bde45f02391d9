"""Federated evaluation for real (issue 31): a hub and a centre on one machine.

Two instances of ``szbench serve`` (embedded mode: each its own worker), each with its own
PostgreSQL database and data directory; the hub's registry on loopback (Debian's
docker-registry); the Docker engine. A researcher uploads an image to the hub (which
pushes it to its registry) and allows external evaluation; the centre's operator follows
the scripted steps of docs/federation.md with the CLI (``szbench centre ...``): key,
registration at the hub, subscription, dataset, sync. The centre's worker pulls the image
from the hub's registry by digest (the engine had it removed) and runs it on the centre's
held-out data; the bundle is drafted, shown, approved by its sha256, verified and shown by
the hub. Then every refusal over the wire: replayed, tampered, forged, wrong centre,
rolled back, a figure the rule would not release, a version its author no longer allows,
and a revoked key; each counted at the hub.

The operator's steps are timed (``FEDERATION_TIMINGS=FILE`` writes them as JSON).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from szbench import migrate
from szbench.federation import bundles, service, signing

from . import _live_services as live
from ._pipeline_factories import Rec, make_prepared_dataset

pytestmark = [pytest.mark.docker, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PG_ADMIN_URL = os.environ.get(
    "SZBENCH_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)

# Detections that depend on every byte of the recording (tests/worker/test_remote_worker.py).
ALGORITHM = """
import os
from pathlib import Path
edf = (Path("/data") / os.environ["INPUT"]).read_bytes()
dur = int(edf[236:244]) * float(edf[244:252])
onset = float(sum(edf) % int(dur - 60))
(Path("/output") / os.environ["OUTPUT"]).write_text(
    "onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n"
    f"{onset:.1f}\\t30.0\\tsz\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{dur:.1f}\\n"
)
"""

RECS = [
    Rec("sub-01", "run-00", 600, ((100, 40),)),
    Rec("sub-02", "run-00", 600, ((300, 30),)),
    Rec("sub-03", "run-00", 600, ((200, 60),)),
]


@dataclass
class Instance:
    """One szbench deployment: its database, data dir, server and CLI."""

    name: str
    root: Path
    database_url: str
    log_dir: Path
    extra: dict[str, str]
    port: int = field(default_factory=live.free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in live.child_env().items() if not k.startswith("SZBENCH_")}
        env.update(
            {
                "SZBENCH_DATABASE_URL": self.database_url,
                "SZBENCH_DATA_DIR": str(self.root / "data"),
                "SZBENCH_PASSWORD_SCRYPT_N": "1024",
                "SZBENCH_LOG_LEVEL": "INFO",
                "SZBENCH_PUBLIC_URL": self.url,
                **self.extra,
            }
        )
        return env

    def log(self) -> str:
        path = self.log_dir / f"{self.name}.log"
        return path.read_text(errors="replace")[-6000:] if path.exists() else ""

    def cli(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "szbench.cli.main", *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if ok:
            assert done.returncode == 0, f"szbench {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done

    def serve(self) -> None:
        log = open(self.log_dir / f"{self.name}.log", "wb")  # noqa: SIM115 (closed with it)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "szbench.cli.main", "serve", "--port", str(self.port)],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def up() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            return False

        live.wait_for(up, 90, f"the {self.name}'s server", logs=self.log)

    def api(self, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        headers = kw.pop("headers", {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.request(method, self.url + path, headers=headers, timeout=60, **kw)


def _database(name: str) -> Iterator[str]:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def two(tmp_path: Path, registry: str, docker_client: Any) -> Iterator[tuple[Instance, Instance]]:
    suffix = uuid.uuid4().hex[:8]
    host = f"federation-test-{suffix}"
    log_dir = live.log_dir_for(tmp_path, host)
    with contextlib.ExitStack() as stack:
        hub_db = stack.enter_context(contextlib.contextmanager(_database)(f"szbench_hub_{suffix}"))
        centre_db = stack.enter_context(
            contextlib.contextmanager(_database)(f"szbench_centre_{suffix}")
        )
        hub = Instance(
            "hub",
            tmp_path / "hub",
            hub_db,
            log_dir,
            {
                "SZBENCH_REGISTRY": registry,
                # No public sample here: versions are activated without a smoke test.
                "SZBENCH_SMOKE_TEST_DATASET": "",
                "SZBENCH_RUNNER_BACKEND": "docker",
                "SZBENCH_WORKER_HOST": host + "-hub",
            },
        )
        centre = Instance(
            "centre",
            tmp_path / "centre",
            centre_db,
            log_dir,
            {
                "SZBENCH_CENTRE_MODE": "true",
                "SZBENCH_RUNNER_BACKEND": "docker",
                "SZBENCH_WORKER_HOST": host,
                "SZBENCH_SMOKE_TEST_DATASET": "",
                # The centre runs only the hub's images (docs/federation.md).
                "SZBENCH_ALLOWED_IMAGES": f"{registry}/szbench/algorithms@",
            },
        )
        try:
            yield hub, centre
        finally:
            for instance in (hub, centre):
                if instance.proc is not None:
                    live.stop_processes([instance.proc])
            from szbench_worker.docker_runner import cleanup_orphans

            for label in (host, host + "-hub"):
                cleanup_orphans(docker_client, host=label, everything=True)


class Steps:
    """The operator's scripted steps, each timed."""

    def __init__(self) -> None:
        self.times: list[tuple[str, float]] = []
        self.started = time.monotonic()

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        began = time.monotonic()
        yield
        self.times.append((what, time.monotonic() - began))

    def report(self) -> dict[str, Any]:
        return {
            "steps": [{"step": s, "seconds": round(t, 2)} for s, t in self.times],
            "total_seconds": round(time.monotonic() - self.started, 2),
        }


def _signed(key_file: Path, data: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    payload = bundles.encode(data)
    signature = signing.sign(key, payload)  # type: ignore[arg-type]
    return payload, {
        "Content-Type": "application/json",
        service.SIGNATURE_HEADER: service.SIGNATURE_SCHEME + signature,
    }


def test_a_centre_publishes_a_signed_result_that_the_hub_verifies_and_shows(
    two: tuple[Instance, Instance], docker_client: Any, tmp_path: Path, registry: str
) -> None:
    from szbench_worker.docker_runner import inspect_image
    from szbench_worker.runner import ImageError

    hub, centre = two
    migrate.upgrade(hub.database_url)
    archive, image_id = live.build_archive(tmp_path, docker_client, ALGORITHM, "federated-algo")

    # --- the hub: an admin, a researcher, an uploaded image the author offers ---
    hub.cli("user", "create", "admin@hub.example", "--role", "admin", "--no-password")
    hub.cli("user", "create", "ada@lab.example", "--no-password")
    hub_admin = hub.cli("token", "create", "admin@hub.example").stdout.strip()
    author = hub.cli("token", "create", "ada@lab.example").stdout.strip()
    hub.serve()
    submitted = subprocess.run(
        [
            sys.executable, "-m", "szbench.cli.main", "algorithm", "submit", "spikes",
            "-v", "1.0", "--image", str(archive), "--server", hub.url, "--token", author,
        ],
        cwd=REPO, env=hub.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr + hub.log()
    algorithms = hub.api("GET", "/api/v1/algorithms", author, params={"mine": "true"}).json()
    algorithm_id = algorithms["items"][0]["id"]

    def active() -> dict[str, Any] | None:
        detail = hub.api("GET", f"/api/v1/algorithms/{algorithm_id}", author).json()
        version = detail["versions"][0]
        return version if version["status"] == "active" else None

    version = live.wait_for(active, 120, "the version's activation", logs=hub.log)
    hub_version_id = version["id"]
    # Not offered until its author allows it.
    assert hub.api("GET", "/api/v1/federation/catalogue").json()["versions"] == []
    allowed = hub.api(
        "PATCH", f"/api/v1/algorithms/{algorithm_id}", author, json={"external_evaluation": True}
    )
    assert allowed.status_code == 200, allowed.text
    offered = hub.api("GET", "/api/v1/federation/catalogue").json()["versions"]
    assert [v["id"] for v in offered] == [hub_version_id]
    assert offered[0]["reference"].startswith(f"{registry}/szbench/algorithms@sha256:")

    # --- the centre's operator, from an installed szbench to the first published result ---
    steps = Steps()
    prepared = make_prepared_dataset(centre.root / "datasets" / "icu", RECS, seed=3)
    with steps.step("szbench db upgrade (the centre's database)"):
        centre.cli("db", "upgrade")
    with steps.step("szbench user create + token create (the centre's admin)"):
        centre.cli("user", "create", "admin@centre.example", "--role", "admin", "--no-password")
        centre_admin = centre.cli("token", "create", "admin@centre.example").stdout.strip()
    with steps.step("szbench centre keygen"):
        made = centre.cli("centre", "keygen").stdout
    public_key = made.split("public key:")[1].split()[0]
    fingerprint = made.split("fingerprint:")[1].split()[0]
    with steps.step("(hub admin) szbench centre register"):
        hub.cli(
            "centre", "register", "south", "--public-key", public_key,
            "--title", "South University Hospital", "--contact", "eeg@south.example",
        )  # fmt: skip
    with steps.step("szbench serve (the centre, embedded worker)"):
        centre.serve()
    with steps.step("register the held-out dataset (API)"):
        made = centre.api(
            "POST", "/api/v1/datasets", centre_admin,
            json={"slug": "icu", "title": "South ICU EEG", "kind": "held_out",
                  "description": "Adult ICU recordings, 2024-2025"},
        )  # fmt: skip
        assert made.status_code == 201, made.text
        made = centre.api(
            "POST", "/api/v1/datasets/icu/versions", centre_admin,
            json={"version": "1", "prepared_path": str(prepared)},
        )  # fmt: skip
        assert made.status_code == 201, made.text
    with steps.step("szbench centre subscribe + dataset"):
        centre.cli("centre", "subscribe", hub.url, "--as", "south")
        centre.cli("centre", "dataset", "icu", "--min-subjects", "3")
    with steps.step("szbench centre sync (queues the hub's version)"):
        synced = centre.cli("centre", "sync").stdout
    # Queued by this sync, or a moment before by the centre's own round (its embedded
    # worker's tick reads the catalogue of a new subscription at once): either way, one.
    assert "1 versions offered" in synced, synced

    def evaluated() -> dict[str, Any] | None:
        answer = centre.api("GET", "/api/v1/evaluations/1", centre_admin)
        if answer.status_code != 200:
            return None
        body: dict[str, Any] = answer.json()
        return body if body["status"] in ("done", "failed", "cancelled") else None

    with steps.step("the centre's worker pulls the image by digest and runs it"):
        evaluation = live.wait_for(evaluated, 300, "the centre's evaluation", logs=centre.log)
    assert evaluation["status"] == "done", (evaluation, centre.log())
    # It came from the hub's registry, by digest, and is the recorded image.
    assert inspect_image(image_id, docker_client).digest == image_id
    pulled = docker_client.images.get(image_id).attrs.get("RepoDigests") or []
    assert any(d.endswith("@" + version["image_digest"]) or "@sha256:" in d for d in pulled)
    with steps.step("szbench centre sync (drafts the bundle)"):
        synced = centre.cli("centre", "sync").stdout
    assert "1 versions offered" in synced, synced
    # Drafted by this sync or by the centre's own round just before: bundle 1, a draft.
    listed = centre.cli("centre", "bundles").stdout
    assert listed.startswith("1\tsequence 1\tresult\tdraft"), listed
    with steps.step("szbench centre show 1 (read the bytes that leave)"):
        shown = centre.cli("centre", "show", "1")
    body = shown.stdout.encode()
    sha = hashlib.sha256(body).hexdigest()
    assert f"(body sha256 {sha}," in shown.stderr
    assert f"POST {hub.url}/api/v1/federation/bundles" in shown.stderr
    draft = json.loads(body)
    assert draft["key"] == fingerprint
    assert draft["dataset"]["subjects"] == 3
    assert set(draft["figures"]) == {
        "event_f1", "event_sensitivity", "event_precision", "event_fp_rate", "sample_f1"
    }  # fmt: skip
    with steps.step("szbench centre approve 1 --sha256 (sent, verified by the hub)"):
        approved = centre.cli("centre", "approve", "1", "--sha256", sha)
    assert "bundle 1: sent (201" in approved.stdout, approved.stdout
    timings = steps.report()
    print(f"\ncentre operator, installed szbench to first published result: {json.dumps(timings)}")
    if os.environ.get("FEDERATION_TIMINGS"):
        Path(os.environ["FEDERATION_TIMINGS"]).write_text(json.dumps(timings, indent=2) + "\n")

    # --- the hub shows it, exactly as sent ---
    results = hub.api("GET", "/api/v1/federation/results").json()
    assert len(results) == 1
    assert results[0]["centre"] == "south"
    assert results[0]["algorithm_version_id"] == hub_version_id
    assert results[0]["figures"] == {
        k: float(v) for k, v in draft["figures"].items() if v is not None
    } | {k: None for k, v in draft["figures"].items() if v is None}
    detail = hub.api("GET", f"/api/v1/federation/results/{results[0]['id']}").json()
    assert detail["payload"].encode() == body
    page = hub.api("GET", "/centres/south")
    assert page.status_code == 200
    assert "South ICU EEG" in page.text
    assert fingerprint in page.text
    external = hub.api("GET", "/external-validation")
    assert "south" in external.text
    assert hub.api("GET", f"/algorithms/{algorithm_id}").text.count("south") >= 1

    # --- each refusal, over the wire, counted ---
    key_file = centre.root / "data" / "federation" / "centre-key.pem"
    post = f"{hub.url}/api/v1/federation/bundles"
    signature_headers = {
        "Content-Type": "application/json",
        service.SIGNATURE_HEADER: shown.stderr.split(f"{service.SIGNATURE_HEADER}: ")[1].split()[0],
    }
    replayed = httpx.post(post, content=body, headers=signature_headers)
    assert (replayed.status_code, replayed.json()["error"]) == (409, "BundleRefused")
    assert "accepted once" in replayed.json()["detail"]
    tampered = httpx.post(
        post, content=body.replace(b'"subjects":3', b'"subjects":9'), headers=signature_headers
    )
    assert tampered.status_code == 401
    assert "forged or altered" in tampered.json()["detail"]
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    stranger = Ed25519PrivateKey.generate()
    forged_data = {
        **draft,
        "sequence": 50,
        "key": signing.fingerprint(signing.public_bytes(stranger.public_key())),
    }
    forged_payload = bundles.encode(forged_data)
    forged = httpx.post(post, content=forged_payload, headers={
        "Content-Type": "application/json",
        service.SIGNATURE_HEADER: service.SIGNATURE_SCHEME + signing.sign(stranger, forged_payload),
    })  # fmt: skip
    assert forged.status_code == 401
    assert "not registered" in forged.json()["detail"]
    # Another registered centre signing for south.
    east_key = Ed25519PrivateKey.generate()
    hub.cli(
        "centre",
        "register",
        "east",
        "--public-key",
        signing.b64url(signing.public_bytes(east_key.public_key())),
    )
    east_data = {
        **draft,
        "sequence": 51,
        "key": signing.fingerprint(signing.public_bytes(east_key.public_key())),
    }
    east_payload = bundles.encode(east_data)
    wrong_centre = httpx.post(post, content=east_payload, headers={
        "Content-Type": "application/json",
        service.SIGNATURE_HEADER: service.SIGNATURE_SCHEME + signing.sign(east_key, east_payload),
    })  # fmt: skip
    assert wrong_centre.status_code == 403
    assert "posts only for itself" in wrong_centre.json()["detail"]
    # Signed with south's own key (as a centre restored from an old backup would send):
    # a later sequence goes through, an earlier one after it is a rollback.
    payload, headers = _signed(key_file, {**draft, "sequence": 5})
    assert httpx.post(post, content=payload, headers=headers).status_code == 201
    payload, headers = _signed(key_file, {**draft, "sequence": 3})
    rolled_back = httpx.post(post, content=payload, headers=headers)
    assert rolled_back.status_code == 409
    assert "not above 5" in rolled_back.json()["detail"]
    unrounded = {**draft, "sequence": 60, "figures": {**draft["figures"], "event_f1": 0.123456}}
    payload, headers = _signed(key_file, unrounded)
    not_released = httpx.post(post, content=payload, headers=headers)
    assert not_released.status_code == 422
    assert "not on the released grid" in not_released.json()["detail"]
    # The author stops offering the version: the centre runs it no more, the hub takes no
    # result of it.
    hub.api(
        "PATCH", f"/api/v1/algorithms/{algorithm_id}", author, json={"external_evaluation": False}
    )
    assert "is no longer offered" in centre.cli("centre", "sync").stdout
    payload, headers = _signed(key_file, {**draft, "sequence": 61})
    not_offered = httpx.post(post, content=payload, headers=headers)
    assert not_offered.status_code == 422
    assert "did not publish it or does not allow it" in not_offered.json()["detail"]
    # A revoked key: the centre's withdrawal, signed with it, is refused, and kept so.
    hub.cli("centre", "revoke-key", "south", fingerprint)
    centre.cli("centre", "withdraw", "1", "--reason", "labels were wrong")
    shown = centre.cli("centre", "show", "2")
    refused = centre.cli(
        "centre",
        "approve",
        "2",
        "--sha256",
        hashlib.sha256(shown.stdout.encode()).hexdigest(),
        ok=False,
    )
    assert refused.returncode == 1
    assert "refused (403 key:" in refused.stdout
    assert "revoked" in refused.stdout
    counted = hub.cli("centre", "refusals").stdout
    by_api = hub.api("GET", "/api/v1/federation/refusals", hub_admin).json()
    assert sum(r["count"] for r in by_api if r["centre"] == "south") >= 7
    for reason in ("replay", "bad_signature", "unknown_key", "wrong_centre", "rollback",
                   "figure_not_released", "version_not_offered", "key_revoked"):  # fmt: skip
        assert reason in counted, counted
    # Rotation: a new key, registered at the hub, and the withdrawal goes through; the
    # result stays in the record, marked withdrawn.
    rotated = centre.cli("centre", "keygen", "--rotate").stdout
    hub.cli(
        "centre", "rotate-key", "south", "--public-key", rotated.split("public key:")[1].split()[0]
    )
    centre.cli("centre", "redraft", "2", ok=False)  # only results are drafted again
    centre.cli("centre", "withdraw", "1", "--reason", "labels were wrong")
    shown = centre.cli("centre", "show", "3")
    done = centre.cli(
        "centre", "approve", "3", "--sha256", hashlib.sha256(shown.stdout.encode()).hexdigest()
    )
    assert "sent (201" in done.stdout
    withdrawn = {r["sequence"]: r for r in hub.api("GET", "/api/v1/federation/results").json()}
    assert sorted(withdrawn) == [1, 5]
    assert withdrawn[1]["withdrawn_at"] is not None
    assert withdrawn[1]["withdrawal_reason"] == "labels were wrong"
    assert withdrawn[5]["withdrawn_at"] is None
    with pytest.raises(ImageError):
        inspect_image("sha256:" + "0" * 64, docker_client)

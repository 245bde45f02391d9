"""The compose deployment: the file is valid and complete, and the stack really starts.

The tool is Debian bookworm's ``docker-compose`` (1.29), installed by the README's test
command (``scripts/test.sh``, through ``scripts/test-services.sh``) on a fresh machine. A
missing tool fails these tests, saying so.

The last tests build the project's images from the locally built base images and start the
API, a worker, the migration, Flower, PostgreSQL, Redis and the registry (the last three built
from Debian packages, via ``docker-compose.local.yml``) on this machine's Docker engine, then
tear everything down (``down -v``).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from szbench.config import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
LOCAL_FILE = ROOT / "docker-compose.local.yml"
ENV_EXAMPLE = ROOT / ".env.example"
SERVICES = {"migrate", "api", "worker-cpu", "worker-gpu", "scheduler", "flower"}
SERVICES |= {"postgres", "redis", "registry"}
LONG_RUNNING = SERVICES - {"migrate"}
UID = 10001  # the images' szbench user


def compose_tool() -> str:
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.fail(
            "docker-compose is not installed: ./scripts/test.sh installs it "
            "(or apt-get install --no-install-recommends docker-compose)"
        )
    return tool


def run_compose(
    *args: str,
    env_file: Path = ENV_EXAMPLE,
    files: tuple[Path, ...] = (COMPOSE_FILE,),
    project: str | None = None,
    timeout: float = 120,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    cmd = [compose_tool(), "--env-file", str(env_file)]
    if project:
        cmd += ["--project-name", project]
    for f in files:
        cmd += ["-f", str(f)]
    # The compose file hands SZBENCH_ENV_FILE to the containers; point it at the same file.
    # Variables of the calling shell would win over the env file: drop szbench's own.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SZBENCH_", "POSTGRES_"))}
    env["SZBENCH_ENV_FILE"] = str(env_file)
    result = subprocess.run(
        [*cmd, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(cmd + list(args))} failed:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return yaml.safe_load(run_compose("config").stdout)


def test_config_lists_every_service(config: dict[str, Any]) -> None:
    assert set(config["services"]) == SERVICES


def test_long_running_services_have_healthchecks_restart_and_log_rotation(
    config: dict[str, Any],
) -> None:
    for name in LONG_RUNNING:
        service = config["services"][name]
        assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        assert service["restart"] == "unless-stopped", name
        assert service["logging"]["options"]["max-size"], name
    migrate = config["services"]["migrate"]
    assert migrate["command"][-1].endswith("szbench db upgrade")
    for name in ("api", "worker-cpu", "worker-gpu"):
        assert config["services"][name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }


def test_api_image_is_slim_and_workers_use_the_worker_image(config: dict[str, Any]) -> None:
    services = config["services"]
    assert services["api"]["image"].startswith("szbench/api:")
    assert services["migrate"]["image"] == services["api"]["image"]
    for name in ("worker-cpu", "worker-gpu", "scheduler", "flower"):
        assert services[name]["image"].startswith("szbench/worker:"), name
    # Only the workers get the Docker socket.
    for name, service in services.items():
        has_socket = any("docker.sock" in source for source, _ in _mounts(service))
        assert has_socket == name.startswith("worker-"), name


def test_the_helper_image_has_a_name_of_its_own(config: dict[str, Any]) -> None:
    """Issue 21 point 2: the runs' clean-up helper is not named as the image of the workers
    that hold the Docker socket (and each worker resolves it to an id when it starts)."""
    services = config["services"]
    for name in ("worker-cpu", "worker-gpu"):
        helper = services[name]["environment"]["SZBENCH_RUNNER_HELPER_IMAGE"]
        assert helper.startswith("szbench/run-helper:"), name
        assert helper.split(":")[0] != services[name]["image"].split(":")[0]


def test_gpu_worker_is_in_the_gpu_profile_and_reserves_its_device(
    config: dict[str, Any],
) -> None:
    gpu = config["services"]["worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    # The reserved device is the one the runner hands to algorithm containers.
    assert device["device_ids"] == [gpu["environment"]["SZBENCH_RUNNER_GPUS"]]
    # Each worker also finishes evaluations (the score queue, docs/pipeline.md), the
    # scheduler too, so a finished evaluation waits behind no queued run.
    assert "--queues=gpu,score" in gpu["command"]
    assert "--queues=cpu,score" in config["services"]["worker-cpu"]["command"]
    # The reconciler's timer and queue (docs/operations.md, "Nothing hangs").
    scheduler = config["services"]["scheduler"]["command"]
    assert "--beat" in scheduler
    assert "--queues=maintenance,score" in scheduler
    for name in set(config["services"]) - {"worker-gpu"}:
        assert "profiles" not in config["services"][name], name


def test_datasets_volume_is_a_host_path_mounted_at_the_same_path(config: dict[str, Any]) -> None:
    assert {"db", "uploads", "datasets", "registry", "redis"} <= set(config["volumes"])
    host_dir = config["volumes"]["datasets"]["driver_opts"]["device"]
    assert config["volumes"]["datasets"]["driver_opts"]["o"] == "bind"
    for name in ("worker-cpu", "worker-gpu", "api"):
        service = config["services"][name]
        targets = dict(_mounts(service))
        # The runner gives the host's dockerd paths from inside the worker: they must match.
        assert targets["datasets"] == host_dir, name
        work_dir = service["environment"]["SZBENCH_RUNNER_WORK_DIR"]
        assert work_dir.startswith(host_dir + "/"), name
    assert config["services"]["api"]["volumes"][-1].endswith(":ro")
    # The shared data dir is never filled from an image (that would reset its owner).
    for name in ("migrate", "api", "worker-cpu", "worker-gpu"):
        (uploads,) = [v for v in config["services"][name]["volumes"] if isinstance(v, dict)]
        assert uploads["source"] == "uploads"
        assert uploads["volume"]["nocopy"] is True


def _mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of each mount, in short ("src:dst[:mode]") or long syntax."""
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            out.append((v["source"], v["target"]))
        else:
            source, target = v.split(":")[:2]
            out.append((source, target))
    return out


def test_workers_share_the_hosts_cpu_claim_lock(config: dict[str, Any]) -> None:
    """Issue 21 point 4: the workers claim cores through the host's lock folder (the one a
    `szbench evaluate` on the host uses too), mounted at the same path."""
    default = str(Settings.model_fields["runner_cpu_lock_dir"].default)
    for name in ("worker-cpu", "worker-gpu"):
        assert (default, default) in _mounts(config["services"][name]), name


def test_workers_reach_the_socket_from_the_host_user_namespace(config: dict[str, Any]) -> None:
    for name in ("worker-cpu", "worker-gpu"):
        service = config["services"][name]
        assert service["userns_mode"] == "host"
        assert service["group_add"], name
        # Long enough for a run to finish on `docker-compose stop` (warm shutdown).
        assert service["stop_signal"] == "SIGTERM"


def test_published_ports_default_to_loopback(config: dict[str, Any]) -> None:
    for name, service in config["services"].items():
        for port in service.get("ports", []):
            published = port if isinstance(port, str) else port.get("host_ip", "")
            assert published.startswith("127.0.0.1"), (name, port)


def test_local_override_uses_images_built_from_debian_packages() -> None:
    config = yaml.safe_load(run_compose("config", files=(COMPOSE_FILE, LOCAL_FILE)).stdout)
    assert config["services"]["postgres"]["image"] == "szbench/postgres:15"
    assert config["services"]["redis"]["image"] == "szbench/redis:7"
    assert config["services"]["registry"]["image"] == "szbench/registry:2"
    assert config["services"]["registry"]["healthcheck"]["test"][1] == "bash"


def test_missing_password_is_a_clear_error(tmp_path: Path) -> None:
    env_file = tmp_path / "no-password.env"
    env_file.write_text(
        "\n".join(
            line
            for line in ENV_EXAMPLE.read_text().splitlines()
            if not line.startswith("POSTGRES_PASSWORD=")
        )
    )
    result = run_compose("config", env_file=env_file, check=False)
    assert result.returncode != 0
    assert "POSTGRES_PASSWORD" in result.stderr


def _documented(text: str) -> set[str]:
    """Names set in .env.example, on a live line or a commented-out one."""
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))


def test_env_example_documents_every_variable_and_setting() -> None:
    documented = _documented(ENV_EXAMPLE.read_text())
    compose_text = COMPOSE_FILE.read_text() + LOCAL_FILE.read_text()
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", compose_text))
    assert used - documented == set(), "compose variables missing from .env.example"
    settings = {f"SZBENCH_{name.upper()}" for name in Settings.model_fields}
    assert settings - documented == set(), "settings missing from .env.example"
    # And nothing documented that no one reads (a typo would silently do nothing).
    readers = {"COMPOSE_PROJECT_NAME"}
    assert documented - used - settings - readers == set(), "unknown names in .env.example"


# --- the stack on this machine's Docker engine ------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _wait_ok(url: str, deadline_s: float) -> tuple[int, str]:
    end = time.monotonic() + deadline_s
    last: tuple[int, str] = (0, "no answer")
    while time.monotonic() < end:
        try:
            last = _get(url)
            if last[0] == 200:
                return last
        except (OSError, urllib.error.URLError) as err:
            last = (0, str(err))
        time.sleep(2)
    return last


def _docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


BASELINE_IMAGE = "szbench/baseline:deploy-test"


@pytest.fixture(scope="module")
def project_images() -> None:
    """Build szbench/api, szbench/worker, the Debian service images (cached), the baseline."""
    compose_tool()
    if _docker("info").returncode != 0:
        pytest.fail("no Docker engine: start it with scripts/test-services.sh")
    build = subprocess.run(
        [str(ROOT / "scripts" / "build-project-images.sh"), "--services"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    if _docker("image", "inspect", "szbench/python-numpy:bookworm").returncode != 0:
        base = subprocess.run(
            [str(ROOT / "scripts" / "build-base-images.sh")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert base.returncode == 0, base.stderr[-4000:]
    baseline = _docker(
        "build",
        "--network",
        "none",
        "-q",
        "--build-arg",
        "BASE_IMAGE=szbench/python-numpy:bookworm",
        "-t",
        BASELINE_IMAGE,
        str(ROOT / "examples" / "baseline"),
    )
    assert baseline.returncode == 0, baseline.stderr


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.usefixtures("project_images")
def test_api_image_has_no_docker_sdk_or_mne_and_runs_as_non_root() -> None:
    probe = (
        "import importlib.util as u, os; "
        "print(os.getuid(), sorted(m for m in ('docker', 'mne', 'szbench') if u.find_spec(m)))"
    )
    api = _docker("run", "--rm", "--network", "none", "szbench/api:latest", "python", "-c", probe)
    worker = _docker(
        "run", "--rm", "--network", "none", "szbench/worker:latest", "python", "-c", probe
    )
    assert api.stdout.split() == [str(UID), "['szbench']"], api.stderr
    assert worker.stdout.strip() == f"{UID} ['docker', 'mne', 'szbench']", worker.stderr


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """An env file for a throwaway compose project; `down -v` whatever happens."""
    datasets = tmp_path / "datasets"
    # Created by the operator; `migrate` hands it to uid 10001 (root owns it here).
    datasets.mkdir()
    os.chmod(tmp_path, 0o755)
    sock = Path("/var/run/docker.sock")
    overrides = {
        "COMPOSE_PROJECT_NAME": f"szbench-test-{secrets.token_hex(4)}",
        "POSTGRES_PASSWORD": secrets.token_hex(16),
        "REDIS_PASSWORD": secrets.token_hex(16),
        "SZBENCH_FLOWER_BASIC_AUTH": f"admin:{secrets.token_hex(8)}",
        "SZBENCH_API_PORT": str(_free_port()),
        "SZBENCH_FLOWER_PORT": str(_free_port()),
        "SZBENCH_REGISTRY_PORT": str(_free_port()),
        "SZBENCH_HOST_DATASETS_DIR": str(datasets),
        "SZBENCH_DOCKER_GID": str(sock.stat().st_gid),
        "SZBENCH_WORKER_STOP_GRACE_PERIOD": "60s",
    }
    lines = [
        line
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line.split("=", 1)[0] not in overrides
    ]
    env_file = tmp_path / "stack.env"
    env_file.write_text("\n".join(lines + [f"{k}={v}" for k, v in overrides.items()]) + "\n")
    assert stat.S_ISSOCK(sock.stat().st_mode)
    info: dict[str, Any] = {
        "env_file": env_file,
        "project": overrides["COMPOSE_PROJECT_NAME"],
        "port": int(overrides["SZBENCH_API_PORT"]),
        "flower_port": int(overrides["SZBENCH_FLOWER_PORT"]),
        "flower_auth": base64.b64encode(overrides["SZBENCH_FLOWER_BASIC_AUTH"].encode()).decode(),
        "registry_port": int(overrides["SZBENCH_REGISTRY_PORT"]),
        "datasets": datasets,
    }
    try:
        yield info
    finally:
        compose = {
            "env_file": env_file,
            "project": info["project"],
            "files": (COMPOSE_FILE, LOCAL_FILE),
            "check": False,
        }
        logs = run_compose("logs", "--no-color", "--tail=40", timeout=60, **compose)
        down = run_compose(
            "down", "-v", "--remove-orphans", "--timeout", "30", timeout=180, **compose
        )
        print(logs.stdout[-6000:])
        assert down.returncode == 0, down.stderr


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.usefixtures("project_images")
def test_stack_starts_answers_probes_and_stops_gracefully(stack: dict[str, Any]) -> None:
    compose = {
        "env_file": stack["env_file"],
        "project": stack["project"],
        "files": (COMPOSE_FILE, LOCAL_FILE),
    }
    # `up` waits for postgres to be healthy and for migrate to exit 0 before api and worker.
    run_compose("up", "-d", "api", "worker-cpu", "flower", "registry", timeout=420, **compose)

    base = f"http://127.0.0.1:{stack['port']}"
    status, body = _wait_ok(base + "/healthz", 120)
    assert status == 200, body
    status, body = _wait_ok(base + "/readyz", 60)
    assert status == 200, body

    ps = run_compose("ps", "-q", "migrate", **compose).stdout.split()
    (migrate_id,) = ps
    state = json.loads(_docker("inspect", "-f", "{{json .State}}", migrate_id).stdout)
    assert (state["Status"], state["ExitCode"]) == ("exited", 0)

    # The worker is a Celery node on the cpu queue, reaches the host's dockerd through the
    # socket, and sees the datasets volume at the host's path, writable.
    ping_cmd = 'celery -A szbench_worker.celery_app inspect ping -d "cpu@$HOSTNAME" --timeout 20'
    ping = run_compose("exec", "-T", "worker-cpu", "sh", "-c", ping_cmd, timeout=90, **compose)
    assert "pong" in ping.stdout
    engine = run_compose(
        "exec",
        "-T",
        "worker-cpu",
        "python",
        "-c",
        "import docker, os, pathlib, sys; docker.from_env().ping(); "
        "p = pathlib.Path(sys.argv[1]) / 'probe'; p.write_text('x'); print(os.getuid(), p)",
        str(stack["datasets"]),
        **compose,
    )
    assert engine.stdout.split() == [str(UID), str(stack["datasets"] / "probe")]
    assert (stack["datasets"] / "probe").stat().st_uid == UID

    # Every service's own health check command passes (compose only waited for some).
    for service in ("api", "worker-cpu", "flower", "registry", "postgres", "redis"):
        (cid,) = run_compose("ps", "-q", service, **compose).stdout.split()
        test = json.loads(_docker("inspect", "-f", "{{json .Config.Healthcheck.Test}}", cid).stdout)
        cmd = ["sh", "-c", test[1]] if test[0] == "CMD-SHELL" else test[1:]
        check = _docker("exec", cid, *cmd, timeout=90)
        assert check.returncode == 0, (service, test, check.stdout, check.stderr)

    # Flower sees the worker; the registry takes a push from the host's engine on loopback.
    flower = f"http://127.0.0.1:{stack['flower_port']}"
    status, body = _wait_ok(flower + "/healthcheck", 60)
    assert (status, body) == (200, "OK")
    request = urllib.request.Request(flower + "/api/workers?refresh=1")
    request.add_unredirected_header("Authorization", "Basic " + stack["flower_auth"])
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert any(name.startswith("cpu@") for name in json.loads(resp.read()))
    pushed = f"127.0.0.1:{stack['registry_port']}/szbench-test/base:1"
    assert _docker("tag", "szbench/python-base:bookworm", pushed).returncode == 0
    try:
        push = _docker("push", pushed, timeout=300)
        assert push.returncode == 0, push.stderr
        status, body = _get(f"http://127.0.0.1:{stack['registry_port']}/v2/_catalog")
        assert "szbench-test/base" in json.loads(body)["repositories"]
    finally:
        _docker("rmi", pushed)

    # The point of the same-path datasets volume: from inside the worker container, the
    # runner stages a recording under SZBENCH_RUNNER_WORK_DIR and the host's dockerd
    # bind-mounts it into the algorithm's container. Synthetic EEG, the baseline image, scores.
    ds = stack["datasets"]
    script = (
        f"szbench synth {ds}/synth --subjects 1 --hours 0.25 --recording-minutes 15 "
        "--seed 3 >/dev/null && "
        f"szbench evaluate --image {BASELINE_IMAGE} --dataset {ds}/synth --json {ds}/scores.json"
    )
    evaluate = run_compose(
        "run", "--rm", "-T", "--no-deps",
        # Embedded mode inside the container (SQLite in its data dir): only the runner path
        # through the host's engine is under test here.
        "-e", "SZBENCH_DATABASE_URL=",
        "worker-cpu", "sh", "-c", script,
        timeout=420, **compose,
    )  # fmt: skip
    scores = json.loads((ds / "scores.json").read_text())
    assert [r["outcome"] for r in scores["recordings"]] == ["ok"], evaluate.stdout
    assert "event_results" in scores
    assert "f1" in scores["event_results"]
    # Staging is cleaned up after the run; nothing of it is left on the host path.
    assert list((ds / ".runs").iterdir()) == []

    # SIGTERM through tini: Celery's warm shutdown and uvicorn's shutdown both exit 0.
    run_compose("stop", "--timeout", "60", "worker-cpu", "api", timeout=150, **compose)
    logs = run_compose("logs", "--no-color", "worker-cpu", "api", **compose).stdout
    assert "Warm shutdown" in logs
    assert "Application shutdown complete" in logs
    for service in ("worker-cpu", "api"):
        (cid,) = run_compose("ps", "-q", service, **compose).stdout.split()
        state = json.loads(_docker("inspect", "-f", "{{json .State}}", cid).stdout)
        assert (state["Status"], state["ExitCode"]) == ("exited", 0), service

"""Unit tests of the runner's pure parts: limits, the container configuration, GPU device
requests, output validation, the fake and the trusted local-process runner. No engine needed
(the Docker runner itself is tested for real in test_docker_runner.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from szbench.config import Settings
from szbench.models import RunOutcome
from szbench_worker.docker_runner import (
    VolumeRefused,
    container_config,
    device_requests,
    output_usage,
    scratch_paths,
)
from szbench_worker.docker_runner.output import output_ok
from szbench_worker.docker_runner.staging import numeric_uid
from szbench_worker.local_runner import LocalProcessRunner
from szbench_worker.runner import (
    MAX_SUBMITTER_DETAIL,
    Limits,
    RunEnd,
    bounded,
    check_output,
    classify,
    crashed_message,
    edf_duration_s,
    gpus_from_settings,
    oom_message,
    output_name_for,
    output_too_big_message,
    owner_alive,
    owner_token,
    timeout_message,
    work_dir_from_settings,
)
from szbench_worker.runner_backend import make_runner
from tests.worker.conftest import write_edf

from .fakes import FakeRun, FakeRunner, bckg_tsv

MiB = 1024**2
HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"


# --- limits -------------------------------------------------------------------------------


def test_limits_from_settings() -> None:
    settings = Settings(
        runner_memory_bytes=3 * 1024**3,
        runner_cpus=1.5,
        runner_pids=99,
        runner_timeout_s=60,
        runner_tmpfs_bytes=8 * MiB,
        runner_output_bytes=2 * MiB,
        runner_user="1000:1000",
        runner_gpus=" 0, GPU-abc ,",
    )
    limits = Limits.from_settings(settings)
    assert limits == Limits(
        memory_bytes=3 * 1024**3,
        cpus=1.5,
        pids=99,
        timeout_s=60,
        tmpfs_bytes=8 * MiB,
        output_bytes=2 * MiB,
        user="1000:1000",
    )
    assert limits.network is False
    assert gpus_from_settings(settings) == ("0", "GPU-abc")
    assert Limits.from_settings(Settings(runner_user="")).user is None
    assert gpus_from_settings(Settings()) == ()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("memory_bytes", 0, "memory_bytes must be a positive integer"),
        ("memory_bytes", 1024, "at least 6 MiB"),
        ("pids", -1, "pids must be a positive integer"),
        ("timeout_s", float("nan"), "timeout_s must be a positive number"),
        ("cpus", 0, "cpus must be a positive number"),
        ("user", "root; rm -rf /", "Limits.user must look like"),
    ],
)
def test_bad_limits_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Limits(**{field: value})  # type: ignore[arg-type]


# --- the container's configuration --------------------------------------------------------


def _config(limits: Limits, gpus: tuple[str, ...] = ()) -> dict[str, object]:
    return container_config(
        image_id="sha256:" + "a" * 64,
        data_dir=Path("/work/run-1/data"),
        output_dir=Path("/work/run-1/output"),
        input_name="rec_eeg.edf",
        output_name="rec_events.tsv",
        limits=limits,
        gpus=gpus,
        labels={"org.szbench.runner": "1"},
    )


def test_container_config_is_the_sandbox() -> None:
    limits = Limits(
        memory_bytes=512 * MiB, cpus=2.5, pids=77, tmpfs_bytes=32 * MiB, log_bytes=12345
    )
    cfg = _config(limits)
    assert cfg["image"] == "sha256:" + "a" * 64
    env = cfg["environment"]
    assert (env["INPUT"], env["OUTPUT"]) == ("rec_eeg.edf", "rec_events.tsv")  # type: ignore[index]
    assert cfg["network_mode"] == "none"
    assert cfg["read_only"] is True
    assert cfg["cap_drop"] == ["ALL"]
    assert cfg["security_opt"] == ["no-new-privileges"]
    assert cfg["pids_limit"] == 77
    assert cfg["mem_limit"] == cfg["memswap_limit"] == 512 * MiB
    assert cfg["nano_cpus"] == 2_500_000_000
    assert cfg["user"] == ""
    tmpfs = f"rw,nosuid,nodev,size={32 * MiB},mode=1777"
    assert cfg["tmpfs"] == {"/tmp": tmpfs, "/tmp/home": tmpfs}
    assert cfg["device_requests"] == []
    assert cfg["labels"] == {"org.szbench.runner": "1"}
    mounts = {m["Target"]: m for m in cfg["mounts"]}  # type: ignore[attr-defined]
    assert set(mounts) == {"/data", "/output"}
    assert mounts["/data"]["Source"] == "/work/run-1/data"
    assert mounts["/data"]["ReadOnly"] is True
    assert mounts["/data"]["Type"] == "bind"
    assert mounts["/output"]["Source"] == "/work/run-1/output"
    assert mounts["/output"]["ReadOnly"] is False
    log_config = cfg["log_config"]
    assert log_config["Type"] == "json-file"  # type: ignore[index]
    assert log_config["Config"]["max-size"] == "12345"  # type: ignore[index]
    assert log_config["Config"]["max-file"] == "1"  # type: ignore[index]


def test_container_config_user_and_network_flag() -> None:
    cfg = _config(Limits(user="65534:65534", network=True))
    assert cfg["user"] == "65534:65534"
    assert cfg["network_mode"] == "bridge"


def test_image_volumes_become_bounded_tmpfs_mounts() -> None:
    """Each VOLUME path gets the /tmp options, so the engine makes no volume on its disk."""
    limits = Limits(tmpfs_bytes=32 * MiB)
    cfg = container_config(
        image_id="sha256:" + "a" * 64,
        data_dir=Path("/work/run-1/data"),
        output_dir=Path("/work/run-1/output"),
        input_name="rec_eeg.edf",
        output_name="rec_events.tsv",
        limits=limits,
        scratch=("/home/app/.cache", "/scratch"),
    )
    options = f"rw,nosuid,nodev,size={32 * MiB},mode=1777"
    assert cfg["tmpfs"] == {
        "/tmp": options,
        "/tmp/home": options,
        "/home/app/.cache": options,
        "/scratch": options,
    }
    # The contract's mounts are untouched.
    assert {m["Target"] for m in cfg["mounts"]} == {"/data", "/output"}  # type: ignore[attr-defined]
    # Owned by the container's user when it is known, so a folder of its own stays its own.
    owned = container_config(
        image_id="sha256:" + "a" * 64,
        data_dir=Path("/work/run-1/data"),
        output_dir=Path("/work/run-1/output"),
        input_name="rec_eeg.edf",
        output_name="rec_events.tsv",
        limits=limits,
        scratch=("/scratch",),
        scratch_owner=(1000, 100),
    )
    assert owned["tmpfs"] == {
        "/tmp": options,
        "/tmp/home": options + ",uid=1000,gid=100",
        "/scratch": options + ",uid=1000,gid=100",
    }


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        ({}, ()),
        ([], ()),
        # Cleaned as the engine cleans them, so each tmpfs key matches the engine's path.
        (["/scratch/"], ("/scratch",)),
        (["//scratch"], ("/scratch",)),
        (["/a/./b/../c"], ("/a/c",)),
        (["/scratch", "/scratch/", "/scratch/sub"], ("/scratch", "/scratch/sub")),
        # The platform's own mounts are already there: the engine makes nothing for them.
        (["/data", "/output", "/tmp", "/data/", "/tmp/"], ()),
        (
            ["/tmp/cache", "/database", "/outputs", "/development"],
            (
                "/database",
                "/development",
                "/outputs",
                "/tmp/cache",
            ),
        ),
        ({"/models": {}, "/var/lib/app": {}}, ("/models", "/var/lib/app")),
    ],
)
def test_scratch_paths(declared: object, expected: tuple[str, ...]) -> None:
    assert scratch_paths(declared) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/data/cache", "inside /data, where the platform mounts the recording read-only"),
        ("/data/../data/x", "inside /data"),
        ("/output/cache", "inside /output, where the platform collects the output"),
        ("/scratch/../output/x", "inside /output"),
        ("/", "the root of the file system"),
        ("/a/..", "the root of the file system"),
        ("/proc", "where the container runtime mounts its own files"),
        ("/sys/fs", "container runtime"),
        ("/dev/shm", "container runtime"),
        ("/etc/hosts", "container runtime"),
        ("/etc/resolv.conf", "container runtime"),
        ("scratch", "which is not an absolute path"),
        ("", "which is not an absolute path"),
    ],
)
def test_scratch_paths_refuse_what_the_contract_or_runtime_owns(path: str, reason: str) -> None:
    with pytest.raises(VolumeRefused) as err:
        scratch_paths(["/scratch", path])
    message = str(err.value)
    assert message.startswith(f"The image declares VOLUME {path!r}, ")
    assert reason in message
    assert message.endswith("Remove it from the image.")


def test_scratch_paths_bound_what_they_echo() -> None:
    """The path comes from the image: shown escaped and cut, never raw."""
    with pytest.raises(VolumeRefused) as err:
        scratch_paths(["/data/" + "x" * 500])
    assert len(str(err.value)) < 250
    assert "x" * 90 + "..." in str(err.value)
    with pytest.raises(VolumeRefused) as err:
        scratch_paths(["/output/\n\x1b[31mred"])
    assert "\n" not in str(err.value)
    assert "\x1b" not in str(err.value)
    assert "'/output/\\n\\x1b[31mred'" in str(err.value)


def test_gpu_device_request_is_exactly_the_assigned_devices() -> None:
    assert device_requests(()) == []
    (request,) = device_requests(("1",))
    assert request["DeviceIDs"] == ["1"]
    assert request["Capabilities"] == [["gpu"]]
    # Never "all GPUs": a count of -1 would hand over every device on the host.
    assert request.get("Count") in (None, 0)
    assert request["Driver"] in (None, "")
    (two,) = device_requests(("GPU-aaaa", "GPU-bbbb"))
    assert two["DeviceIDs"] == ["GPU-aaaa", "GPU-bbbb"]
    cfg = _config(Limits(), gpus=("3",))
    assert [r["DeviceIDs"] for r in cfg["device_requests"]] == [["3"]]  # type: ignore[attr-defined]


def test_numeric_uid_for_output_ownership() -> None:
    assert numeric_uid(None) == (0, 0)
    assert numeric_uid("") == (0, 0)
    assert numeric_uid("1000") == (1000, None)
    assert numeric_uid("1000:2000") == (1000, 2000)
    assert numeric_uid("app") is None
    assert numeric_uid("1000:staff") is None


def test_output_size_counts_an_unlistable_folder_as_a_violation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a worker that is not root sees when a container hides files from it."""
    out = tmp_path / "output"
    (out / "private").mkdir(parents=True)
    (out / "private" / "blob").write_bytes(b"x" * 5000)
    (out / "rec_events.tsv").write_bytes(b"y" * 100)
    assert output_usage(out) is not None
    # Allocated blocks count: a 5000-byte file and two folders are more than 10 kB here.
    assert output_ok(out, Limits(output_bytes=100_000))
    assert not output_ok(out, Limits(output_bytes=1_000))
    assert not output_ok(out, Limits(output_bytes=100_000, output_files=2))

    # Root lists any folder, so the test plays the unprivileged worker: listing "private"
    # fails as it would for a 0700 folder of another uid.
    real_scandir = os.scandir

    def scandir(path: object) -> object:
        if str(path).endswith("private"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    assert output_usage(out) is None
    assert not output_ok(out, Limits(output_bytes=100_000))


def test_owner_token_names_a_live_process_only() -> None:
    token = owner_token()
    assert owner_alive(token)
    pid, _, ticks = token.partition(".")
    assert not owner_alive(f"{pid}.{int(ticks) + 1}")  # same pid, another process (reuse)
    assert not owner_alive("999999999.1")
    assert not owner_alive("garbage")


# --- contract helpers and output validation ----------------------------------------------


def test_output_name_and_edf_duration(tmp_path: Path) -> None:
    assert output_name_for(Path("sub-1_run-0_eeg.edf")) == "sub-1_run-0_events.tsv"
    edf = write_edf(tmp_path / "x_eeg.edf", duration_s=17)
    assert edf_duration_s(edf) == 17.0
    bad = tmp_path / "bad.edf"
    bad.write_bytes(b"0" * 100)
    with pytest.raises(ValueError, match=r"bad\.edf: not an EDF file"):
        edf_duration_s(bad)


def test_check_output_outcomes(tmp_path: Path) -> None:
    tsv = tmp_path / "hidden-dir" / "rec_events.tsv"
    tsv.parent.mkdir()
    kwargs = {"contract_name": "rec_events.tsv", "recording_duration_s": 60.0, "hide": (tmp_path,)}

    missing = check_output(tsv, **kwargs)  # type: ignore[arg-type]
    assert missing.outcome is RunOutcome.NO_OUTPUT
    assert missing.message == "The algorithm wrote no /output/rec_events.tsv."

    tsv.write_text(bckg_tsv(60.0))
    ok = check_output(tsv, **kwargs)  # type: ignore[arg-type]
    assert ok.outcome is RunOutcome.OK
    assert ok.annotations is not None
    assert ok.annotations.recording_duration_s == 60.0

    tsv.write_text(bckg_tsv(60.9))  # within the 1 s tolerance
    assert check_output(tsv, **kwargs).outcome is RunOutcome.OK  # type: ignore[arg-type]

    tsv.write_text(bckg_tsv(3600.0))
    wrong = check_output(tsv, **kwargs)  # type: ignore[arg-type]
    assert wrong.outcome is RunOutcome.INVALID_OUTPUT
    assert "recordingDuration 3600 s does not match" in wrong.message

    # The parser's reason echoes what the algorithm wrote: host paths go, length is capped.
    leak = f"{tsv} " + "A" * 5000
    tsv.write_text(HEADER + f"{leak}\t1\tsz\tn/a\tn/a\tn/a\t60\n")
    bad = check_output(tsv, **kwargs)  # type: ignore[arg-type]
    assert bad.outcome is RunOutcome.INVALID_OUTPUT
    assert bad.message.startswith("/output/rec_events.tsv row 2: ")
    assert str(tmp_path) not in bad.message
    assert len(bad.message) <= len("/output/rec_events.tsv row 2: ") + MAX_SUBMITTER_DETAIL

    tsv.unlink()
    (tmp_path / "elsewhere.tsv").write_text(bckg_tsv(60.0))
    tsv.symlink_to(tmp_path / "elsewhere.tsv")
    link = check_output(tsv, **kwargs)  # type: ignore[arg-type]
    assert link.outcome is RunOutcome.INVALID_OUTPUT
    assert link.message == "/output/rec_events.tsv must be a regular file."
    tsv.unlink()
    tsv.mkdir()
    assert check_output(tsv, **kwargs).outcome is RunOutcome.INVALID_OUTPUT  # type: ignore[arg-type]


def test_bounded_keeps_head_and_tail() -> None:
    assert bounded("short", 100) == "short"
    text = "HEAD" + "x" * 10_000 + "TAIL"
    cut = bounded(text, 1000)
    assert len(cut) <= 1000
    assert cut.startswith("HEAD")
    assert cut.endswith("TAIL")
    assert "characters cut" in cut


# --- how a run ended: one classification for every runner --------------------------------

T, F = True, False
TIMEOUT, OOM = RunOutcome.TIMEOUT, RunOutcome.OUT_OF_MEMORY
BIG, CRASHED = RunOutcome.INVALID_OUTPUT, RunOutcome.CRASHED

#: Every combination of what a runner can see when the process ends:
#: exit code, timed out, OOM-killed, /output over its caps -> outcome (None: the TSV decides).
CLASSIFY_TABLE = [
    # A timeout explains everything after it (its kill gives 137 or no exit code at all).
    *[
        (code, T, oom, over, TIMEOUT)
        for code in (0, 137, None)
        for oom in (F, T)
        for over in (F, T)
    ],
    (0, F, F, F, None),
    (0, F, T, F, None),  # a child was OOM-killed; the algorithm survived and exited 0
    (0, F, F, T, BIG),
    (0, F, T, T, BIG),
    (137, F, F, F, CRASHED),
    (137, F, T, F, OOM),
    (137, F, F, T, BIG),  # the watchdog's kill, or a crash after filling /output
    (137, F, T, T, OOM),  # memory first: the kernel's kill ended it
    (None, F, F, F, CRASHED),
    (None, F, T, F, OOM),
    (None, F, F, T, BIG),
    (None, F, T, T, OOM),
]


def test_classify_table_covers_every_combination() -> None:
    seen = {(code, to, oom, over) for code, to, oom, over, _ in CLASSIFY_TABLE}
    assert len(seen) == len(CLASSIFY_TABLE) == 3 * 2 * 2 * 2


@pytest.mark.parametrize(("exit_code", "timed_out", "oom", "over", "outcome"), CLASSIFY_TABLE)
def test_classify(
    exit_code: int | None, timed_out: bool, oom: bool, over: bool, outcome: RunOutcome | None
) -> None:
    limits = Limits(timeout_s=4, memory_bytes=96 * MiB, output_bytes=MiB)
    end = RunEnd(exit_code=exit_code, timed_out=timed_out, oom_killed=oom, output_over_limit=over)
    verdict = classify(end, limits)
    if outcome is None:
        assert verdict is None
        return
    assert verdict is not None
    messages = {
        TIMEOUT: timeout_message(limits),
        OOM: oom_message(limits),
        BIG: output_too_big_message(limits),
        CRASHED: crashed_message(exit_code),
    }
    assert verdict == (outcome, messages[outcome])


# --- the fake -----------------------------------------------------------------------------


def test_fake_runner_canned_outputs(tmp_path: Path) -> None:
    rec_ok = write_edf(tmp_path / "a_eeg.edf", duration_s=12)
    rec_bad = write_edf(tmp_path / "b_eeg.edf", duration_s=12)
    rec_slow = write_edf(tmp_path / "c_eeg.edf", duration_s=12)
    fake = FakeRunner(
        {
            "b_eeg.edf": FakeRun(tsv=HEADER + "x\t1\tsz\tn/a\tn/a\tn/a\t12\n"),
            "c_eeg.edf": FakeRun(outcome=RunOutcome.TIMEOUT, exit_code=137),
        }
    )
    out = tmp_path / "out"
    ok = fake.run(image="img", recording=rec_ok, output_dir=out, limits=Limits(), gpus=("0",))
    assert ok.outcome is RunOutcome.OK
    assert ok.output_tsv == out / "a_events.tsv"
    assert ok.annotations is not None
    assert ok.gpu is not None
    assert ok.gpu.device_ids == ("0",)
    bad = fake.run(image="img", recording=rec_bad, output_dir=out, limits=Limits())
    assert bad.outcome is RunOutcome.INVALID_OUTPUT
    assert "row 2" in bad.submitter_message
    slow = fake.run(image="img", recording=rec_slow, output_dir=out, limits=Limits())
    assert slow.outcome is RunOutcome.TIMEOUT
    assert slow.exit_code == 137
    assert [c["recording"] for c in fake.calls] == [rec_ok, rec_bad, rec_slow]


# --- the trusted local-process runner -----------------------------------------------------

DETECTOR = """
import os, sys, time
from pathlib import Path
mode = sys.argv[1]
# Written for the container contract: /data and /output joined with INPUT / OUTPUT.
edf = Path("/data") / os.environ["INPUT"]
header = edf.read_bytes()[:256]
duration = int(header[236:244]) * float(header[244:252])
print("read", edf.name, flush=True)
if mode == "sleep":
    time.sleep(60)
if mode == "crash":
    sys.exit(5)
if mode == "fill-then-crash":
    (Path("/output") / os.environ["OUTPUT"]).write_text("x" * 4096)
    sys.exit(3)
if mode == "ok":
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\\tduration\\teventType\\trecordingDuration\\n"
        f"2\\t3\\tsz\\t{duration}\\n"
    )
"""


@pytest.mark.parametrize(
    ("mode", "outcome", "exit_code"),
    [
        ("ok", RunOutcome.OK, 0),
        ("crash", RunOutcome.CRASHED, 5),
        # Told about its output first, as the Docker runner tells it (classify's order).
        ("fill-then-crash", RunOutcome.INVALID_OUTPUT, 3),
        ("none", RunOutcome.NO_OUTPUT, 0),
        ("sleep", RunOutcome.TIMEOUT, None),
    ],
)
def test_local_process_runner(
    tmp_path: Path, mode: str, outcome: RunOutcome, exit_code: int | None
) -> None:
    (tmp_path / "detect.py").write_text(DETECTOR)
    (tmp_path / "data").mkdir()
    rec = write_edf(tmp_path / "data" / "r_eeg.edf", duration_s=8)
    runner = LocalProcessRunner(f"python3 detect.py {mode}", cwd=tmp_path)
    assert runner.argv[0] == sys.executable
    result = runner.run(
        image="baseline",
        recording=rec,
        output_dir=tmp_path / "out",
        limits=Limits(timeout_s=2, output_bytes=1024),
    )
    assert result.outcome is outcome, result.admin_log
    if exit_code is not None:
        assert result.exit_code == exit_code
    assert result.sandbox == "local-process"
    assert result.image_digest.startswith("local-process:sha256:")
    assert result.admin_log.startswith("TRUSTED LOCAL PROCESS (not sandboxed)")
    assert "read r_eeg.edf" in result.admin_log
    assert str(tmp_path) not in result.submitter_message
    if outcome is RunOutcome.OK:
        assert result.annotations is not None
        assert result.annotations.events.tolist() == [[2.0, 5.0]]
        assert result.output_tsv == tmp_path / "out" / "r_events.tsv"


def test_local_runner_digest_follows_the_script(tmp_path: Path) -> None:
    (tmp_path / "detect.py").write_text("print(1)\n")
    first = LocalProcessRunner("python3 detect.py", cwd=tmp_path).digest
    (tmp_path / "detect.py").write_text("print(2)\n")
    assert LocalProcessRunner("python3 detect.py", cwd=tmp_path).digest != first


def test_make_runner_backends() -> None:
    local = make_runner(Settings(runner_backend="local", runner_local_command="python3 -c pass"))
    assert isinstance(local, LocalProcessRunner)
    with pytest.raises(ValueError, match="SZBENCH_RUNNER_BACKEND"):
        make_runner(Settings(runner_backend="podman"))


def test_one_work_dir_default(tmp_path: Path) -> None:
    assert work_dir_from_settings(Settings(data_dir=tmp_path)) == tmp_path / "runs"
    elsewhere = tmp_path / "staging"
    assert work_dir_from_settings(Settings(data_dir=tmp_path, runner_work_dir=elsewhere)) == (
        elsewhere
    )


def test_local_runner_stages_in_the_work_dir(tmp_path: Path) -> None:
    """The local runner's scratch folder lives in the same work dir as the Docker runner's,
    and goes with its run."""
    seen = tmp_path / "seen"
    script = (
        "import os, pathlib; "
        f"pathlib.Path({str(seen)!r}).write_text(os.path.dirname(os.environ['OUTPUT']))"
    )
    (tmp_path / "detect.py").write_text(script)
    rec = write_edf(tmp_path / "r_eeg.edf", duration_s=8)
    settings = Settings(
        data_dir=tmp_path,
        runner_backend="local",
        runner_local_command=f"{sys.executable} {tmp_path / 'detect.py'}",
    )
    runner = make_runner(settings)
    assert isinstance(runner, LocalProcessRunner)
    result = runner.run(
        image="baseline", recording=rec, output_dir=tmp_path / "out", limits=Limits()
    )
    assert result.outcome is RunOutcome.NO_OUTPUT
    scratch = Path(seen.read_text())
    assert scratch.parent == tmp_path / "runs"
    assert not scratch.exists()

"""Issue 30.1 and 30.6: what a newcomer meets on a fresh machine, by the README's commands.

- The README's test command installs what its tests need: the fast stage's compose tests
  need ``docker-compose``, so ``scripts/test-services.sh`` (which ``scripts/test.sh`` runs
  first, in the fast stage too) installs it when it is not on PATH; and ``.ci/run`` runs
  nothing before the README's command that installs anything.
- The quick start's first screen is szbench's: ``scripts/setup.sh`` says one line per step
  and keeps what apt and pip print in ``var/log/setup.log``.

The scripts run for real, copied into a folder of the test's own, with stand-ins for the
one thing a test may not do (install Debian packages): ``apt-get`` and ``dpkg`` are small
scripts that record what they were asked and print what the real ones print. PATH is this
machine's with the compose tool taken out, as on a fresh machine.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What dpkg prints while apt-get installs a package: the noise the quick start must not show.
APT_NOISE = "\n".join(
    line
    for n in range(12)
    for line in (
        f"Selecting previously unselected package libnoise{n}.",
        f"Preparing to unpack .../libnoise{n}_1.0_amd64.deb ...",
        f"Unpacking libnoise{n} (1.0) ...",
        f"Setting up libnoise{n} (1.0) ...",
    )
)


def _script(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _path_without(tmp: Path, *left_out: str) -> str:
    """This machine's PATH as one folder of links, without the commands ``left_out``."""
    farm = tmp / "path"
    farm.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for entry in Path(folder).iterdir():
            target = farm / entry.name
            if entry.name in left_out or target.exists() or target.is_symlink():
                continue
            if entry.is_file() and os.access(entry, os.X_OK):
                target.symlink_to(entry)
    return str(farm)


def _stand_ins(tmp: Path, *, missing: list[str]) -> tuple[Path, Path]:
    """``apt-get``, ``dpkg`` and ``sudo`` stand-ins; the log of what apt-get was asked.
    ``dpkg -s`` says the packages ``missing`` are not installed; ``apt-get install
    docker-compose`` puts a working ``docker-compose`` on PATH."""
    shims = tmp / "shims"
    shims.mkdir()
    asked = tmp / "apt-get.log"
    _script(
        shims / "apt-get",
        f'echo "$*" >> {shlex.quote(str(asked))}\n'
        'case " $* " in *" install "*)\n'
        f"  cat <<'NOISE'\n{APT_NOISE}\nNOISE\n"
        '  case " $* " in *" docker-compose "*)\n'
        f"    printf '#!/bin/sh\\necho 1.29.2\\n' > {shlex.quote(str(shims))}/docker-compose\n"
        f"    chmod +x {shlex.quote(str(shims))}/docker-compose ;;\n"
        "  esac ;;\n"
        "esac\n",
    )
    missing_words = " ".join(missing)
    _script(
        shims / "dpkg",
        f'for p in {missing_words}; do [ "$2" = "$p" ] && exit 1; done\nexit 0\n',
    )
    _script(shims / "sudo", 'exec "$@"\n')
    return shims, asked


def _copy_scripts(tmp: Path, *names: str) -> Path:
    repo = tmp / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in names:
        shutil.copy2(ROOT / "scripts" / name, repo / "scripts" / name)
    return repo


@pytest.mark.postgres
@pytest.mark.redis
def test_the_readme_test_command_installs_the_compose_tool(tmp_path: Path) -> None:
    """The fast stage's services step on a machine without ``docker-compose``: it installs
    Debian's (without the engine it recommends), and the tool is there afterwards."""
    repo = _copy_scripts(tmp_path, "test-services.sh")
    shims, asked = _stand_ins(tmp_path, missing=["docker-compose"])
    fresh = _path_without(tmp_path, "docker-compose")
    assert shutil.which("docker-compose", path=fresh) is None
    path = f"{shims}{os.pathsep}{fresh}"
    env = {**os.environ, "PATH": path, "SZBENCH_SERVICES": "databases"}
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "test-services.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    installs = [line for line in asked.read_text().splitlines() if " install " in f" {line} "]
    assert installs == ["install -y -qq --no-install-recommends docker-compose"]
    assert shutil.which("docker-compose", path=path) is not None
    # Run again with the tool there: nothing more is installed.
    again = subprocess.run(
        ["bash", str(repo / "scripts" / "test-services.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert [line for line in asked.read_text().splitlines() if " install " in f" {line} "] == (
        installs
    )


def test_ci_runs_nothing_before_the_readme_test_command_that_installs() -> None:
    """``.ci/run`` may run before the README's command only what that command runs itself
    (``scripts/setup.sh``) and checks that install nothing (``make lint``)."""
    commands = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd ", "export "))
    ]
    assert "./scripts/test.sh" in commands, commands
    before = commands[: commands.index("./scripts/test.sh")]
    assert set(before) <= {"./scripts/setup.sh", "make lint"}, before
    assert "./scripts/setup.sh" in (ROOT / "scripts" / "test.sh").read_text()
    lint = (ROOT / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    for installer in ("apt-get", "pip install", "setup.sh", "ci-deploy-check"):
        assert installer not in lint, lint
    # The fast stage's services step installs the compose tool (the test above runs it).
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    assert "SZBENCH_SERVICES=databases ./scripts/test-services.sh" in test_sh


def test_setup_says_one_line_per_step_and_logs_the_rest(tmp_path: Path) -> None:
    """Issue 30.6: about 60 lines of apt's and pip's output came before the quick start's
    scores. ``scripts/setup.sh`` on a fresh machine (a Debian package and the project to
    install) prints one line per step; what the tools said is in var/log/setup.log."""
    repo = _copy_scripts(tmp_path, "setup.sh")
    for name in ("pyproject.toml", "requirements.lock"):
        (repo / name).write_text("")
    # The project's install, as pip prints it, by the venv's python (a stand-in: no package
    # index here), older than pyproject.toml so that it runs.
    (repo / ".venv" / "bin").mkdir(parents=True)
    _script(
        repo / ".venv" / "bin" / "python",
        'for n in $(seq 20); do echo "Collecting package$n"; '
        'echo "  Using cached package$n-1.0-py3-none-any.whl"; done\n',
    )
    stamp = repo / ".venv" / ".szbench-installed"
    stamp.touch()
    os.utime(stamp, (1_600_000_000, 1_600_000_000))
    shims, asked = _stand_ins(tmp_path, missing=["python3-venv"])
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "setup.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    shown = (done.stdout + done.stderr).splitlines()
    assert len(shown) <= 2, shown
    assert all(line.startswith("== ") for line in shown), shown
    log = (repo / "var" / "log" / "setup.log").read_text()
    assert "Setting up libnoise0" in log
    assert "Collecting package20" in log
    assert "install -y -qq python3-venv" in asked.read_text()


def test_a_failing_setup_step_shows_its_output(tmp_path: Path) -> None:
    repo = _copy_scripts(tmp_path, "setup.sh")
    shims, _ = _stand_ins(tmp_path, missing=["gcc"])
    _script(shims / "apt-get", 'echo "E: Unable to locate package gcc" >&2; exit 100\n')
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "setup.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "E: Unable to locate package gcc" in done.stderr

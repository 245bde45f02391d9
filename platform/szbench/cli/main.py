"""Entry point of the ``szbench`` console command.

Each command group lives in its own module under ``szbench.cli`` and is registered here.
Commands that drive worker code (datasets, evaluation) import it lazily inside the
command, so that the API image, which has no docker SDK or MNE, can still run the CLI.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
import typer.core

from szbench import __version__

#: Optional dependencies, by top-level module, and the extra of pyproject.toml that installs
#: them. A command that needs one of them, run where it is missing, names the extra.
OPTIONAL_MODULES = {
    "docker": "worker",
    "mne": "worker",
    "edfio": "worker",
    "scipy": "worker",
    "flower": "ops",
}


def _command_path(group: Any, argv: list[str]) -> str:
    """``szbench dataset prepare`` for ``argv`` = ``["dataset", "prepare", "DIR", ...]``."""
    words = ["szbench"]
    command = group
    for arg in argv:
        # Typer's groups have ``commands`` (its vendored Click's, not the click package's).
        sub = getattr(command, "commands", {}).get(arg) if not arg.startswith("-") else None
        if sub is None:
            break
        words.append(arg)
        command = sub
    return " ".join(words)


class _Szbench(typer.Typer):
    """The command line's boundary: a missing optional dependency becomes one clear line."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Typer's Rich error panels are wrapped at 80 columns when stderr is not a terminal;
        # Click's plain "Error: ..." line keeps a long path whole for grep and CI logs.
        if not sys.stderr.isatty():
            typer.core.HAS_RICH = False
        try:
            return super().__call__(*args, **kwargs)
        except ModuleNotFoundError as exc:
            extra = OPTIONAL_MODULES.get((exc.name or "").partition(".")[0])
            if extra is None:
                raise
            command = _command_path(typer.main.get_command(self), sys.argv[1:])
            print(
                f"{command} needs the '{extra}' extra: pip install 'szbench[{extra}]' "
                f"(module {exc.name} is not installed)",
                file=sys.stderr,
            )
            raise SystemExit(2) from None


app = _Szbench(
    name="szbench",
    help="Open benchmarking of EEG seizure-detection algorithms with SzCORE scoring.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"szbench {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """szbench: run, score and rank seizure-detection algorithms."""


# Command groups register themselves below (one import per module).
from szbench.cli import algorithm as _algorithm  # noqa: E402
from szbench.cli import centre as _centre  # noqa: E402
from szbench.cli import dataset as _dataset  # noqa: E402
from szbench.cli import db as _db  # noqa: E402
from szbench.cli import evaluate as _evaluate  # noqa: E402
from szbench.cli import gpu_check as _gpu_check  # noqa: E402
from szbench.cli import leaderboard as _leaderboard  # noqa: E402
from szbench.cli import score as _score  # noqa: E402
from szbench.cli import serve as _serve  # noqa: E402
from szbench.cli import synth as _synth  # noqa: E402
from szbench.cli import tokens as _tokens  # noqa: E402
from szbench.cli import uploads as _uploads  # noqa: E402
from szbench.cli import users as _users  # noqa: E402

app.add_typer(_dataset.app, name="dataset")
app.add_typer(_db.app, name="db")
app.command(name="evaluate")(_evaluate.evaluate)
app.command(name="gpu-check")(_gpu_check.gpu_check)
app.command("synth")(_synth.synth)
app.command("score")(_score.score)
app.command("serve")(_serve.serve)
app.add_typer(_users.app, name="user")
app.add_typer(_tokens.app, name="token")
app.add_typer(_uploads.app, name="upload")
app.add_typer(_algorithm.app, name="algorithm")
app.add_typer(_centre.app, name="centre")
app.command("leaderboard")(_leaderboard.leaderboard)

if __name__ == "__main__":  # pragma: no cover
    app()

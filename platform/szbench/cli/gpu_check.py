"""``szbench gpu-check``: check a worker host's GPU the way a gpu-queue run gets it.

A small CUDA program runs through the real runner with the GPU's device request; the
command prints the GPU's model and driver (``nvidia-smi`` on this host, as each run's
provenance records them) and whether the container saw the GPU. The work lives in
:mod:`szbench_worker.gpu_check` (imported lazily: the API image runs this CLI and carries
no worker).
"""

from __future__ import annotations

import typer
from rich.text import Text

from szbench.cli.console import make_console


def gpu_check(
    gpu: str = typer.Option(
        "",
        "--gpu",
        help="The GPU to check: an index or GPU-<uuid> (default: the first of "
        "SZBENCH_RUNNER_GPUS, else 0).",
    ),
    base: str | None = typer.Option(
        None,
        "--base",
        help="Image with python3 to build the check on (default: szbench/python-numpy:bookworm, "
        "else szbench/worker:latest).",
    ),
    show_log: bool = typer.Option(False, "--log", help="Print the run's log too."),
) -> None:
    """Run a small CUDA check through the runner on one GPU; exit 0 when the container saw it
    and used its memory."""
    from szbench.config import get_settings
    from szbench_worker import gpu_check as check

    console = make_console()
    settings = get_settings()
    chosen = gpu or next((g.strip() for g in settings.runner_gpus.split(",") if g.strip()), "0")
    try:
        result = check.run_check(chosen, settings, base=base)
    except check.GpuCheckError as exc:
        console.print(Text(str(exc), style="red"))
        raise typer.Exit(2) from exc
    for line in result.lines():
        console.print(Text(line))
    if show_log:
        console.print(Text(result.log))
    raise typer.Exit(0 if result.passed else 1)

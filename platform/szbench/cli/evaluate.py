"""``szbench evaluate``: run an algorithm on a local dataset end to end, in embedded mode.

The orchestration lives in :mod:`szbench_worker.local_eval` (imported lazily: the API image
runs this CLI for migrations and carries no worker); this command parses options, shows
progress and prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from szbench.cli.console import make_console

console = make_console(stderr=True)


def _say(line: str) -> None:
    # Paths and the preparer's problems are the operator's text: printed literally.
    console.print(Text(line))


def evaluate(
    dataset: Path = typer.Option(
        ...,
        "--dataset",
        exists=True,
        file_okay=False,
        help="A prepared dataset (with manifest.json) or a raw SzCORE BIDS tree.",
    ),
    image: str | None = typer.Option(None, "--image", help="Docker image on this engine."),
    tar: Path | None = typer.Option(
        None, "--tar", exists=True, dir_okay=False, help="`docker save` tarball (.tar/.tar.gz)."
    ),
    local_process: str | None = typer.Option(
        None,
        "--local-process",
        help="Run this trusted command instead of a container (NOT sandboxed; for the "
        "bundled baseline on machines without Docker).",
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write scores + recordings here."),
    reuse: bool = typer.Option(
        True, "--reuse/--no-reuse", help="Reuse finished runs of the same image and recording."
    ),
    name: str = typer.Option(
        "local", "--name", help="Algorithm name the result is listed under on the leaderboard."
    ),
    dataset_name: str | None = typer.Option(
        None,
        "--dataset-name",
        help="Dataset slug for the leaderboard (default: derived from the dataset's checksum).",
    ),
    public_sample: bool = typer.Option(
        False,
        "--public-sample",
        help="Register a new dataset as a public sample: its annotations and the detections "
        "are shown on the web pages (timelines) to anyone who may read them.",
    ),
    gpus: str | None = typer.Option(
        None,
        "--gpus",
        help="Give the image this GPU (an index or GPU-<uuid>), as a worker of the gpu queue "
        "does: the same device request, each run recording the GPU's model and driver. Every "
        "recording runs again (no result of a run without this GPU is reused).",
    ),
) -> None:
    """Run an algorithm on every recording of a local dataset, score it, print the results."""
    chosen = [x for x in (image, tar, local_process) if x is not None]
    if len(chosen) != 1:
        console.print("[red]Give exactly one of --image, --tar or --local-process.[/red]")
        raise typer.Exit(2)
    if gpus is not None and (local_process is not None or not gpus.strip() or "," in gpus):
        console.print(
            "[red]--gpus takes one GPU (an index or GPU-<uuid>), as a worker owns one, and "
            "needs --image or --tar: a local process gets no device.[/red]"
        )
        raise typer.Exit(2)
    from szbench_worker import local_eval

    data_dir = local_eval.use_embedded_mode(gpus=gpus.strip() if gpus else None)
    progress = Progress(
        TextColumn("[bold]Recordings"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    bar = progress.add_task("run", total=None, status="queued", start=False)
    try:
        prepared, was_raw = local_eval.prepared_dataset(dataset.resolve(), data_dir, _say)
        source = local_eval.open_source(
            image, tar, local_process, gpus=(gpus.strip(),) if gpus else ()
        )

        def started(evaluation_id: int) -> None:
            console.print(
                Text(
                    f"Evaluation {evaluation_id}: {source.reference} ({source.digest[:19]}...) "
                    f"via {source.sandbox}, on {dataset}"
                )
            )
            progress.start()
            progress.start_task(bar)

        def moved(status: str, done: int, total: int) -> None:
            progress.update(bar, completed=done, total=total or None, status=status)

        try:
            evaluation_id = local_eval.run_evaluation(
                source,
                prepared=prepared,
                name=name,
                dataset_slug=dataset_name,
                public_sample=public_sample,
                reuse=reuse and gpus is None,
                wants_gpu=gpus is not None,
                say=_say,
                on_started=started,
                on_progress=moved,
            )
        finally:
            progress.stop()
    except local_eval.LocalEvaluationError as exc:
        console.print(Text(str(exc), style="red"))
        raise typer.Exit(2) from exc
    except KeyboardInterrupt:
        console.print("Interrupted. Finished recordings are kept: the same command reuses them.")
        raise typer.Exit(130) from None

    result = local_eval.result_of(evaluation_id, strip_eeg_prefix=was_raw)
    if result.report is not None:
        from szbench.cli.results_table import report_table

        make_console().print(report_table(result.report, title=f"SzCORE scores, {source.sandbox}"))
    for provenance in sorted({r.gpu for r in result.recordings if r.gpu}):
        # What each run recorded of its GPU, as a worker's runs record it.
        console.print(Text(f"GPU of the runs: {provenance}"))
    if gpus is not None and not any(r.gpu for r in result.recordings):
        console.print(Text(f"No run recorded GPU {gpus}.", style="red"))
    for r in result.recordings:
        if r.outcome != "ok":
            # The message may quote what the container wrote: printed literally, never as markup.
            console.print(Text(f"{r.path}: {r.outcome}: {r.message}", style="yellow"))
    if result.message:
        console.print(Text(result.message))
    if json_out is not None:
        payload: dict[str, Any] = {}
        if result.report is not None:
            payload["sample_results"] = result.report["sample_results"]
            payload["event_results"] = result.report["event_results"]
        payload["recordings"] = [r.as_json() for r in result.recordings]
        json_out.write_text(json.dumps(payload, indent=2) + "\n")
        console.print(Text(f"Wrote {json_out}"))
    if result.status.value != "done":
        console.print(Text(f"Evaluation {result.status.value}.", style="red"))
        raise typer.Exit(1)

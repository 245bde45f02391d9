"""What a viewer learns about the runs and the reference of an evaluation.

Two things reach non-admins only in a controlled form, because a submitter controls what
their container does with the held-out recording it reads:

- run details: a run's detailed message (which may quote the algorithm's output), exit
  code, logs, wall time and memory can all be chosen by the container from the bytes of
  its input. On held-out data a non-admin gets a fixed text per outcome and nothing else;
  the detailed message stays with admins (and with the owner of a public-sample run, who
  may see the public recording anyway);
- facts the reference annotations determine (per-recording counts such as
  ``event_ref_true``, per-subject figures, reference timelines) and the per-recording
  outcome, whose choice is itself a channel: shown per the evaluation's
  :class:`~szbench.models.Disclosure` level (the phase's override, else the dataset's;
  public samples are always disclosed fully).

Admins always see everything. The rules are functions of plain values so that the read
caches can apply them to their stored facts (:func:`level_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from szbench.auth import policy
from szbench.errors import Forbidden, Unauthorized
from szbench.models import Dataset, DatasetKind, Disclosure, Evaluation, RunOutcome, User

_RANK = {Disclosure.AGGREGATE: 0, Disclosure.SUBJECT: 1, Disclosure.RECORDING: 2}

#: What a non-admin reads about a held-out run: fixed per outcome, no byte from the run.
OUTCOME_TEXT: dict[RunOutcome | None, str] = {
    None: "Not run yet.",
    RunOutcome.OK: "The algorithm produced a valid output; it was scored.",
    RunOutcome.TIMEOUT: "The algorithm ran past the time limit and was stopped.",
    RunOutcome.OUT_OF_MEMORY: "The algorithm exceeded the memory limit and was killed.",
    RunOutcome.CRASHED: "The algorithm failed (it exited with an error or was stopped).",
    RunOutcome.NO_OUTPUT: "The algorithm wrote no output file.",
    RunOutcome.INVALID_OUTPUT: "The algorithm's output does not follow the output contract.",
    RunOutcome.INFRASTRUCTURE_ERROR: "The run failed because of a platform fault.",
}

#: The summary of finished runs that a viewer without per-recording disclosure gets.
OK_KEY, FAILED_KEY = "ok", "failed"


def level_of(
    dataset_kind: DatasetKind, dataset_level: Disclosure | None, phase_level: Disclosure | None
) -> Disclosure:
    """The disclosure of an evaluation on a dataset of ``dataset_kind``.

    >>> level_of(DatasetKind.HELD_OUT, Disclosure.AGGREGATE, Disclosure.RECORDING).value
    'recording'
    >>> level_of(DatasetKind.PUBLIC_SAMPLE, Disclosure.AGGREGATE, None).value
    'recording'
    """
    if dataset_kind == DatasetKind.PUBLIC_SAMPLE:
        return Disclosure.RECORDING
    return phase_level or dataset_level or Disclosure.AGGREGATE


@dataclass(frozen=True)
class View:
    """What one viewer may see of one evaluation."""

    admin: bool
    owner: bool
    held_out: bool
    level: Disclosure
    signed_in: bool = True

    @property
    def subjects(self) -> bool:
        """Per-subject figures and counts."""
        return self.admin or _RANK[self.level] >= _RANK[Disclosure.SUBJECT]

    @property
    def recordings(self) -> bool:
        """Per-recording outcomes, counts and reference timelines."""
        return self.admin or self.level == Disclosure.RECORDING

    @property
    def run_details(self) -> bool:
        """Detailed messages and exit codes of runs."""
        return self.admin or (self.owner and not self.held_out)

    @property
    def run_resources(self) -> bool:
        """Wall time, peak memory and timestamps of runs (a container can choose them)."""
        return self.admin or not self.held_out

    def require_subjects(self, evaluation_id: int) -> None:
        if not self.subjects:
            self._refuse(f"per-subject results of evaluation {evaluation_id}")

    def require_recordings(self, evaluation_id: int) -> None:
        if not self.recordings:
            self._refuse(f"per-recording results of evaluation {evaluation_id}")

    def _refuse(self, what: str) -> NoReturn:
        detail = (
            f"{what} are not disclosed: its held-out dataset discloses "
            f"{self.level.value} figures only"
        )
        # Only an admin could see more; an anonymous caller is told to sign in, as elsewhere.
        raise Forbidden(detail) if self.signed_in else Unauthorized(detail)


def evaluation_level(evaluation: Evaluation) -> Disclosure:
    dataset: Dataset = evaluation.dataset_version.dataset
    phase = evaluation.algorithm_version.phase
    return level_of(dataset.kind, dataset.disclosure, phase.disclosure if phase else None)


def view_of(viewer: User | None, evaluation: Evaluation) -> View:
    return View(
        admin=policy.is_admin(viewer),
        owner=policy.owns(viewer, evaluation.algorithm_version.algorithm),
        held_out=evaluation.dataset_version.dataset.kind != DatasetKind.PUBLIC_SAMPLE,
        level=evaluation_level(evaluation),
        signed_in=viewer is not None,
    )


def run_message(view: View, outcome: RunOutcome | None, detail: str) -> str:
    """The run's message as this viewer may read it."""
    return detail if view.run_details else OUTCOME_TEXT[outcome]


def outcome_summary(view: View, counts: dict[str, int], *, finished: bool) -> dict[str, int]:
    """Finished runs by outcome, or what this viewer may know of them.

    Without per-recording disclosure: nothing while the evaluation runs (which run failed
    when would tell each run's outcome), then only how many runs succeeded and failed.
    """
    if view.recordings:
        return counts
    if not finished:
        return {}
    ok = counts.get(RunOutcome.OK.value, 0)
    summary = {OK_KEY: ok, FAILED_KEY: sum(counts.values()) - ok}
    return {key: n for key, n in summary.items() if n}

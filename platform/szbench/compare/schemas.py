"""Bodies of the comparison route."""

from __future__ import annotations

from pydantic import BaseModel, Field

from szbench.disclosure.decision import Comparing


class ComparedEvaluation(BaseModel):
    evaluation_id: int
    algorithm_id: int
    algorithm: str
    algorithm_version: str
    title: str
    owner: str
    value: float | None = Field(description="The metric's mean over subjects (as ranked).")


class SubjectRow(BaseModel):
    subject: str
    values: list[float | None] = Field(
        description="The metric of this subject per compared evaluation, in their order; "
        "null where undefined (e.g. F1 of a subject without seizures and detections)."
    )


class PairedTest(BaseModel):
    a: int = Field(description="Evaluation id of A.")
    b: int = Field(description="Evaluation id of B.")
    mean_difference: float | None = Field(
        description="Mean over subjects of A - B (at the aggregate level rounded to the "
        "released decimals; null where the test is withheld)."
    )
    low: float | None = Field(description="Bootstrap interval of the mean difference.")
    high: float | None
    p_value: float | None = Field(
        description="Two-sided paired permutation (sign-flip) test of no difference (at the "
        "aggregate level rounded up to the released decimals)."
    )
    exact: bool = Field(description="Every sign flip enumerated (else random flips).")
    n_subjects: int = Field(description="Subjects with a value under both (the pairs).")
    smallest_p: float | None = Field(
        description="The smallest p-value the test can give over n_subjects pairs: 2/2^n "
        "when every flip is enumerated (n <= 16), else 1/(1 + random flips); null without pairs."
    )
    withheld: str | None = Field(
        default=None, description="Why the test's figures are null for this caller."
    )


class Comparison(BaseModel):
    dataset: str
    dataset_version: str
    metric: str
    confidence_level: float
    n_resamples: int
    release: Comparing = Field(
        description="subjects: per-subject values and tests as computed; test: the paired "
        "tests alone (aggregate disclosure), rounded, over at least min_subjects subjects."
    )
    min_subjects: int = Field(
        description="Subjects a paired test needs at the aggregate level "
        "(SZBENCH_INTERVALS_MIN_SUBJECTS)."
    )
    subjects_withheld: str | None = Field(
        description="Why there are no per-subject values (null where they are shown)."
    )
    evaluations: list[ComparedEvaluation]
    subjects: list[SubjectRow] = Field(description="Empty where per-subject values are withheld.")
    tests: list[PairedTest] = Field(description="One per pair of compared evaluations.")

"""Bodies of the comparison route."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
    mean_difference: float | None = Field(description="Mean over subjects of A - B.")
    low: float | None = Field(description="Bootstrap interval of the mean difference.")
    high: float | None
    p_value: float | None = Field(
        description="Two-sided paired permutation (sign-flip) test of no difference."
    )
    exact: bool = Field(description="Every sign flip enumerated (else random flips).")
    n_subjects: int = Field(description="Subjects with a value under both (the pairs).")


class Comparison(BaseModel):
    dataset: str
    dataset_version: str
    metric: str
    confidence_level: float
    n_resamples: int
    evaluations: list[ComparedEvaluation]
    subjects: list[SubjectRow]
    tests: list[PairedTest] = Field(description="One per pair of compared evaluations.")

"""What the quota endpoint returns."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from szbench.quotas.service import Usage


class UsageOut(BaseModel):
    limit: int | None = Field(description="The limit; null when there is none.")
    used: int = Field(description="Uses counted against the limit now.")
    remaining: int | None = Field(description="Uses left now; null when there is no limit.")
    resets_at: datetime | None = Field(
        description="When the count next drops so that one more use is available (old uses "
        "leave the 24 h window); null when nothing is counted or the limit has no window."
    )

    @classmethod
    def of(cls, usage: Usage) -> UsageOut:
        return cls(
            limit=usage.limit,
            used=usage.used,
            remaining=usage.remaining,
            resets_at=usage.resets_at,
        )


class PhaseUsageOut(UsageOut):
    phase: str


class QuotaOut(BaseModel):
    """The caller's quotas: what they may still start."""

    exempt: bool = Field(description="True for admins, who have no quota.")
    window_s: int = Field(description="Length of the rolling window of the daily limits.")
    held_out_runs: UsageOut = Field(
        description="Full passes over held-out data in the last 24 h: each new version, "
        "re-run or requested evaluation on a held-out dataset is one."
    )
    submissions: UsageOut = Field(description="Algorithm versions submitted in the last 24 h.")
    phases: list[PhaseUsageOut] = Field(
        description="Each open phase with a submission quota (re-runs of its versions count)."
    )

"""Bodies and answers of the team routes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from szbench.models import Team, TeamRole
from szbench.quotas.schemas import UsageOut
from szbench.quotas.service import Quotas


class TeamCreate(BaseModel):
    name: str = Field(max_length=100, description="Unique among teams (case ignored).")


class MemberAdd(BaseModel):
    email: str = Field(
        max_length=320,
        description="The e-mail address of an existing active account (confirmed, where the "
        "server sends e-mail). Nothing is sent to them.",
    )
    role: TeamRole = TeamRole.MEMBER


class MemberUpdate(BaseModel):
    role: TeamRole


class MemberOut(BaseModel):
    user_id: int
    name: str
    email: str
    role: TeamRole
    added_at: datetime


class TeamAlgorithmOut(BaseModel):
    id: int
    name: str
    title: str
    owner_id: int


class TeamSummary(BaseModel):
    id: int
    name: str
    created_at: datetime
    members: int = Field(description="How many members it has.")
    role: TeamRole | None = Field(description="The caller's role; null for an admin outside it.")

    @classmethod
    def of(cls, team: Team, caller_id: int) -> TeamSummary:
        role = next((m.role for m in team.members if m.user_id == caller_id), None)
        return cls(
            id=team.id,
            name=team.name,
            created_at=team.created_at,
            members=len(team.members),
            role=role,
        )


class TeamQuotaOut(BaseModel):
    """What the team may still start; each member is held to their own limits as well."""

    held_out_runs: UsageOut
    submissions: UsageOut


class TeamOut(TeamSummary):
    member_list: list[MemberOut]
    algorithms: list[TeamAlgorithmOut]
    quota: TeamQuotaOut

    @classmethod
    def full(
        cls, team: Team, caller_id: int, algorithms: list[TeamAlgorithmOut], quota: Quotas
    ) -> TeamOut:
        return cls(
            **TeamSummary.of(team, caller_id).model_dump(),
            member_list=[
                MemberOut(
                    user_id=m.user_id,
                    name=m.user.name,
                    email=m.user.email,
                    role=m.role,
                    added_at=m.added_at,
                )
                for m in team.members
            ],
            algorithms=algorithms,
            quota=TeamQuotaOut(
                held_out_runs=UsageOut.of(quota.held_out_runs),
                submissions=UsageOut.of(quota.submissions),
            ),
        )

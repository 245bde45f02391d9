"""``/api/v1/users``: user administration (admins only), and each user's own quota."""

from __future__ import annotations

from fastapi import APIRouter, status

from szbench.api.deps import SessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import IdPath, Page, PageDep
from szbench.auth import accounts, mail, service
from szbench.auth.dependencies import AdminOnly, SignedIn
from szbench.auth.schemas import ResetLinkIn, ResetLinkOut
from szbench.errors import Conflict
from szbench.quotas import service as quotas
from szbench.quotas.schemas import PhaseUsageOut, QuotaOut, UsageOut
from szbench.users.schemas import UserCreate, UserOut, UserUpdate

router = APIRouter(prefix="/users", tags=["users"], responses=ERROR_RESPONSES)


@router.get("", response_model=Page[UserOut])
def list_users(session: SessionDep, _admin: AdminOnly, page: PageDep) -> Page[UserOut]:
    """All users, oldest first."""
    users, total = service.list_users(session, limit=page.limit, offset=page.offset)
    return Page(
        items=[UserOut.model_validate(u) for u in users],
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.post("", response_model=UserOut, status_code=status.HTTP_201_CREATED)
def create_user(body: UserCreate, session: SessionDep, _admin: AdminOnly) -> UserOut:
    """Create a user with any role."""
    user = service.create_user(
        session, email=body.email, password=body.password, name=body.name, role=body.role
    )
    return UserOut.model_validate(user)


@router.get("/me/quota", response_model=QuotaOut)
def my_quota(session: SessionDep, caller: SignedIn) -> QuotaOut:
    """The caller's remaining submissions and held-out evaluations, and when they free up."""
    assert caller.user is not None
    mine = quotas.quotas_of(session, caller.user)
    return QuotaOut(
        exempt=mine.exempt,
        window_s=int(quotas.DAY.total_seconds()),
        held_out_runs=UsageOut.of(mine.held_out_runs),
        submissions=UsageOut.of(mine.submissions),
        phases=[
            PhaseUsageOut(phase=phase.slug, **UsageOut.of(usage).model_dump())
            for phase, usage in mine.phases
        ],
    )


@router.get("/{user_id}", response_model=UserOut)
def get_user(user_id: IdPath, session: SessionDep, _admin: AdminOnly) -> UserOut:
    """One user."""
    return UserOut.model_validate(service.get_user(session, user_id))


@router.patch("/{user_id}", response_model=UserOut)
def update_user(
    user_id: IdPath, body: UserUpdate, session: SessionDep, _admin: AdminOnly
) -> UserOut:
    """Change a user's name, role, password or active flag."""
    user = service.get_user(session, user_id)
    service.update_user(
        session,
        user,
        name=body.name,
        role=body.role,
        is_active=body.is_active,
        password=body.password,
    )
    return UserOut.model_validate(user)


@router.post("/{user_id}/password-reset", response_model=ResetLinkOut)
def issue_reset_link(
    user_id: IdPath, body: ResetLinkIn, session: SessionDep, _admin: AdminOnly
) -> ResetLinkOut:
    """A one-time password reset link for a user (and optionally e-mail it to them)."""
    user = service.get_user(session, user_id)
    if body.send_email and not mail.enabled():
        raise Conflict("send_email: e-mail is not configured on this server (SZBENCH_SMTP_HOST)")
    url, expires_at, emailed = accounts.issue_reset_link(user, by_mail=body.send_email)
    return ResetLinkOut(url=url, expires_at=expires_at, emailed=emailed)

"""``/api/v1/phases``: challenge phases (quotas, hidden results) and publishing."""

from __future__ import annotations

from fastapi import APIRouter, status

from szbench.api.deps import SessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import Page, PageDep
from szbench.auth.dependencies import AdminOnly, Anyone
from szbench.models import Phase
from szbench.phases import service
from szbench.phases.schemas import PhaseCreate, PhaseOut, PhaseUpdate, PublishOut

router = APIRouter(prefix="/phases", tags=["phases"], responses=ERROR_RESPONSES)


def _out(phase: Phase) -> PhaseOut:
    fields = {name: getattr(phase, name) for name in PhaseOut.model_fields if name != "accepting"}
    return PhaseOut(**fields, accepting=service.refusal(phase) is None)


@router.get("", response_model=Page[PhaseOut])
def list_phases(session: SessionDep, _caller: Anyone, page: PageDep) -> Page[PhaseOut]:
    """All phases."""
    rows, total = service.list_phases(session, limit=page.limit, offset=page.offset)
    return Page(
        items=[_out(p) for p in rows],
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.post("", response_model=PhaseOut, status_code=status.HTTP_201_CREATED)
def create_phase(body: PhaseCreate, session: SessionDep, _admin: AdminOnly) -> PhaseOut:
    """Create a phase."""
    return _out(service.create_phase(session, **body.model_dump()))


@router.get("/{slug}", response_model=PhaseOut)
def get_phase(slug: str, session: SessionDep, _caller: Anyone) -> PhaseOut:
    """One phase."""
    return _out(service.get_phase(session, slug))


@router.patch("/{slug}", response_model=PhaseOut)
def update_phase(slug: str, body: PhaseUpdate, session: SessionDep, _admin: AdminOnly) -> PhaseOut:
    """Change a phase's title, dates, quota, visibility, disclosure or whether it is open."""
    phase = service.get_phase(session, slug)
    changes = body.model_dump()
    for key in service.NULLABLE:
        if key not in body.model_fields_set:
            del changes[key]
    return _out(service.update_phase(session, phase, **changes))


@router.post("/{slug}/publish", response_model=PublishOut)
def publish_phase(slug: str, session: SessionDep, _admin: AdminOnly) -> PublishOut:
    """Publish every result of a phase (hidden results become visible to everyone)."""
    return PublishOut(published=service.publish_phase(session, service.get_phase(session, slug)))

"""``/api/v1/phases``: challenge phases (quotas, hidden results) and publishing."""

from __future__ import annotations

from fastapi import APIRouter, status

from szbench.api.deps import SessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import Page, PageDep
from szbench.auth.dependencies import AdminOnly, Anyone
from szbench.disclosure import facts as rule_facts
from szbench.models import DatasetVersion, Phase
from szbench.phases import service
from szbench.phases.schemas import (
    DatasetVersionRef,
    PhaseCreate,
    PhaseOut,
    PhaseUpdate,
    PublishOut,
)

router = APIRouter(prefix="/phases", tags=["phases"], responses=ERROR_RESPONSES)


_DERIVED = ("accepting", "release", "dataset_versions")


def _out(phase: Phase) -> PhaseOut:
    fields = {name: getattr(phase, name) for name in PhaseOut.model_fields if name not in _DERIVED}
    return PhaseOut(
        **fields,
        accepting=service.refusal(phase) is None,
        release=rule_facts.rules_of(phase).release,
        dataset_versions=[
            DatasetVersionRef(dataset=dv.dataset.slug, version=dv.version)
            for dv in phase.dataset_versions
        ],
    )


def _named(session: SessionDep, refs: list[DatasetVersionRef]) -> list[DatasetVersion]:
    return service.resolve_dataset_versions(session, [(r.dataset, r.version) for r in refs])


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
    fields = body.model_dump(exclude={"dataset_versions"})
    named = _named(session, body.dataset_versions)
    return _out(service.create_phase(session, **fields, dataset_versions=named))


@router.get("/{slug}", response_model=PhaseOut)
def get_phase(slug: str, session: SessionDep, _caller: Anyone) -> PhaseOut:
    """One phase."""
    return _out(service.get_phase(session, slug))


@router.patch("/{slug}", response_model=PhaseOut)
def update_phase(slug: str, body: PhaseUpdate, session: SessionDep, _admin: AdminOnly) -> PhaseOut:
    """Change a phase's title, dates, quota, visibility, rules, data or whether it is open."""
    phase = service.get_phase(session, slug)
    changes = body.model_dump(exclude={"dataset_versions"})
    for key in service.NULLABLE:
        if key not in body.model_fields_set:
            del changes[key]
    if body.dataset_versions is not None:
        service.set_dataset_versions(session, phase, _named(session, body.dataset_versions))
    return _out(service.update_phase(session, phase, **changes))


@router.post("/{slug}/publish", response_model=PublishOut)
def publish_phase(slug: str, session: SessionDep, _admin: AdminOnly) -> PublishOut:
    """Publish every result of a phase (hidden results become visible to everyone)."""
    return PublishOut(published=service.publish_phase(session, service.get_phase(session, slug)))

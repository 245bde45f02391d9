"""Pagination: every list takes ``limit`` and ``offset`` and answers with the total."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Generic, TypeVar

from fastapi import Depends, Path, Query
from pydantic import BaseModel

T = TypeVar("T")

MAX_LIMIT = 500


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


@dataclass(frozen=True)
class PageParams:
    limit: int = 50
    offset: int = 0


async def page_params(
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page.")] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9, description="Items to skip.")] = 0,
) -> PageParams:
    return PageParams(limit=limit, offset=offset)


PageDep = Annotated[PageParams, Depends(page_params)]


# Database ids are 32-bit integers: a larger id in a path is "not found", never a 500.
MAX_ID = 2**31 - 1
IdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="Numeric id.")]
IdQuery = Annotated[int | None, Query(ge=1, le=MAX_ID)]

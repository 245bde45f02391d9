"""Request-scoped dependencies shared by every router."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends
from sqlalchemy.orm import Session

from szbench.db import get_sessionmaker


def get_session() -> Iterator[Session]:
    """The request's unit of work: commit when the route returns, roll back when it raises."""
    session = get_sessionmaker()()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


# scope="function": the commit happens before the response is sent, so a client that got
# a 2xx can read what it wrote, and a failed commit is reported instead of lost.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]

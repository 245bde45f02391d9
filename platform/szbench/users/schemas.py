"""Bodies of the admin user routes."""

from __future__ import annotations

from pydantic import BaseModel, Field

from szbench.auth.schemas import CHOOSING_RULES, UserOut
from szbench.models import Role

__all__ = ["UserCreate", "UserOut", "UserUpdate"]


class UserCreate(BaseModel):
    email: str = Field(max_length=320)
    password: str | None = Field(default=None, max_length=1000, description=CHOOSING_RULES)
    name: str = Field(default="", max_length=200)
    role: Role = Role.RESEARCHER


class UserUpdate(BaseModel):
    name: str | None = Field(default=None, max_length=200)
    role: Role | None = None
    is_active: bool | None = None
    password: str | None = Field(default=None, max_length=1000, description=CHOOSING_RULES)

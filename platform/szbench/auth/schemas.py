"""Request and response bodies of the auth and token routes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from szbench.models import Role


class UserOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    email: str
    name: str
    role: Role
    is_active: bool
    email_verified_at: datetime | None = Field(
        default=None, description="When the address was confirmed (null: not yet)."
    )
    created_at: datetime


class LoginIn(BaseModel):
    email: str = Field(max_length=320)
    password: str = Field(max_length=1000)


# The length rule is a setting, checked by the service (szbench.auth.passwords).
CHOOSING_RULES = (
    "At least SZBENCH_PASSWORD_MIN_LENGTH characters (default 10), not one of the most common "
    "passwords, not the email address."
)


class SignupIn(BaseModel):
    email: str = Field(max_length=320)
    password: str = Field(max_length=1000, description=CHOOSING_RULES)
    name: str = Field(default="", max_length=200)


class PasswordChangeIn(BaseModel):
    current_password: str = Field(max_length=1000)
    new_password: str = Field(max_length=1000, description=CHOOSING_RULES)


class TokenOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str = Field(description="'web session' marks a browser's sign-in (reserved name).")
    prefix: str = Field(description="First characters of the secret, to tell tokens apart.")
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="The secret. Shown only in this response; store it now.")
    token_type: str = "bearer"  # noqa: S105 - the OAuth token type, not a secret


class LoginOut(BaseModel):
    token: str
    token_type: str = "bearer"  # noqa: S105 - the OAuth token type, not a secret
    expires_at: datetime | None
    user: UserOut


class TokenIn(BaseModel):
    name: str = Field(default="", max_length=200)
    scopes: list[str] | None = Field(
        default=None,
        max_length=3,
        description="Subset of read, write, admin; default: all the role allows.",
    )
    expires_in_days: int | None = Field(default=None, ge=1, le=3650)


class PasswordResetIn(BaseModel):
    token: str = Field(max_length=2000, description="From the reset link (its token= part).")
    new_password: str = Field(max_length=1000, description=CHOOSING_RULES)


class ResetRequestIn(BaseModel):
    email: str = Field(max_length=320)


class ResetRequested(BaseModel):
    detail: str


class VerifyIn(BaseModel):
    token: str = Field(max_length=2000, description="From the verification link.")


class ResetLinkIn(BaseModel):
    send_email: bool = Field(
        default=False, description="Also e-mail the link to the user (needs SMTP)."
    )


class ResetLinkOut(BaseModel):
    url: str = Field(description="Works once; hand it to the user over a trusted channel.")
    expires_at: datetime
    emailed: bool

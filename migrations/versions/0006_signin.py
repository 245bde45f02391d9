"""security: sign-in throttling and credential revocation

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 16:20:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0006'
down_revision: Union[str, Sequence[str], None] = '0005'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('password_changed_at', sa.DateTime(timezone=True), nullable=True)
        )
    op.create_table(
        'signin_throttle',
        sa.Column('key', sa.String(length=64), nullable=False),
        sa.Column('failures', sa.Integer(), nullable=False),
        sa.Column('last_attempt_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('blocked_until', sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('key', name=op.f('pk_signin_throttle')),
    )
    with op.batch_alter_table('signin_throttle', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_signin_throttle_last_attempt_at'), ['last_attempt_at'], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table('signin_throttle', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_signin_throttle_last_attempt_at'))
    op.drop_table('signin_throttle')
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_column('password_changed_at')

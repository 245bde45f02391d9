"""worker heartbeats name what a sick host lacks (engine, work dir, recording cache,
platform API, registry, a setting), for metrics (issue 29 item 2; branch h3)

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-12 10:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0022'
down_revision: Union[str, Sequence[str], None] = '0021'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('worker_heartbeats', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fault_kind', sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('worker_heartbeats', schema=None) as batch_op:
        batch_op.drop_column('fault_kind')

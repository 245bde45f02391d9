"""worker heartbeats say what keeps a worker from running containers; runs given up for a
platform fault are marked for the reconciler (issue 21)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 04:30:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0012'
down_revision: Union[str, Sequence[str], None] = '0011'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('worker_heartbeats', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fault', sa.String(length=500), nullable=True))
    with op.batch_alter_table('recording_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('released_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('recording_runs', schema=None) as batch_op:
        batch_op.drop_column('released_at')
    with op.batch_alter_table('worker_heartbeats', schema=None) as batch_op:
        batch_op.drop_column('fault')

"""security: atomic quotas covering re-runs

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 16:20:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0004'
down_revision: Union[str, Sequence[str], None] = '0003'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # The quota checks count one user's versions and evaluations of the last 24 hours,
    # under that user's lock: indexes keep the locked section short.
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.create_index('ix_evaluations_quota', ['created_by_id', 'created_at'])
    with op.batch_alter_table('algorithm_versions', schema=None) as batch_op:
        batch_op.create_index('ix_algorithm_versions_quota', ['created_by_id', 'created_at'])


def downgrade() -> None:
    with op.batch_alter_table('algorithm_versions', schema=None) as batch_op:
        batch_op.drop_index('ix_algorithm_versions_quota')
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.drop_index('ix_evaluations_quota')

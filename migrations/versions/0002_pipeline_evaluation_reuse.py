"""pipeline: evaluations.reuse_runs (a re-run forces fresh container runs)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 11:10:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0002'
down_revision: Union[str, Sequence[str], None] = '0001'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('reuse_runs', sa.Boolean(), server_default='1', nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.drop_column('reuse_runs')

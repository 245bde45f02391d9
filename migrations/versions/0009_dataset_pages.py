"""web: dataset facts and algorithm links

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 17:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0009'
down_revision: Union[str, Sequence[str], None] = '0008'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('licence', sa.String(length=200), server_default='', nullable=False)
        )
        batch_op.add_column(sa.Column('citation', sa.Text(), server_default='', nullable=False))
    with op.batch_alter_table('recordings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('seizures', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('recordings', schema=None) as batch_op:
        batch_op.drop_column('seizures')
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.drop_column('citation')
        batch_op.drop_column('licence')

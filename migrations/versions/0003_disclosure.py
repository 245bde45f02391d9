"""security: disclosure levels of held-out facts

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 16:20:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0003'
down_revision: Union[str, Sequence[str], None] = '0002'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


_LEVELS = ('aggregate', 'subject', 'recording')


def upgrade() -> None:
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                'disclosure',
                sa.Enum(*_LEVELS, name='disclosure', native_enum=False, length=32),
                server_default='aggregate',
                nullable=False,
            )
        )
    with op.batch_alter_table('phases', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                'disclosure',
                sa.Enum(*_LEVELS, name='disclosure', native_enum=False, length=32),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table('phases', schema=None) as batch_op:
        batch_op.drop_column('disclosure')
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.drop_column('disclosure')

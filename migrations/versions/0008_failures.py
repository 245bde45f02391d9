"""leaderboards: failed evaluations and duplicate images

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 17:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0008'
down_revision: Union[str, Sequence[str], None] = '0007'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


_RULES = ('unranked', 'no_detections')


def upgrade() -> None:
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                'failed_recordings',
                sa.Enum(*_RULES, name='failedrecordings', native_enum=False, length=32),
                server_default='unranked',
                nullable=False,
            )
        )
    with op.batch_alter_table('phases', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                'failed_recordings',
                sa.Enum(*_RULES, name='failedrecordings', native_enum=False, length=32),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table('phases', schema=None) as batch_op:
        batch_op.drop_column('failed_recordings')
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.drop_column('failed_recordings')

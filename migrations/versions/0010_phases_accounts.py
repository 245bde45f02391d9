"""web: phases with dates, accounts (e-mail verification), algorithm links and withdrawal

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 17:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0010'
down_revision: Union[str, Sequence[str], None] = '0009'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('phases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('opens_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('closes_at', sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('email_verified_at', sa.DateTime(timezone=True), nullable=True)
        )
    with op.batch_alter_table('algorithms', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('code_url', sa.String(length=500), server_default='', nullable=False)
        )
        batch_op.add_column(
            sa.Column('paper_url', sa.String(length=500), server_default='', nullable=False)
        )
        batch_op.add_column(sa.Column('withdrawn_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('algorithms', schema=None) as batch_op:
        batch_op.drop_column('withdrawn_at')
        batch_op.drop_column('paper_url')
        batch_op.drop_column('code_url')
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_column('email_verified_at')
    with op.batch_alter_table('phases', schema=None) as batch_op:
        batch_op.drop_column('closes_at')
        batch_op.drop_column('opens_at')

"""security: upload sessions capped and swept

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 16:20:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0005'
down_revision: Union[str, Sequence[str], None] = '0004'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'uploads',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('owner_id', sa.Integer(), nullable=False),
        sa.Column('filename', sa.String(length=255), nullable=False),
        sa.Column('size_bytes', sa.BigInteger(), nullable=False),
        sa.Column('state', sa.Enum('open', 'refused', name='uploadstate', native_enum=False,
                                   length=32), nullable=False),
        sa.Column('refused_because', sa.Text(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['owner_id'], ['users.id'],
                                name=op.f('fk_uploads_owner_id_users'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_uploads')),
    )
    with op.batch_alter_table('uploads', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_uploads_owner_id'), ['owner_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_uploads_created_at'), ['created_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('uploads', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_uploads_created_at'))
        batch_op.drop_index(batch_op.f('ix_uploads_owner_id'))
    op.drop_table('uploads')

"""reliability: heartbeats and the reconciler

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 16:20:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0007'
down_revision: Union[str, Sequence[str], None] = '0006'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'worker_heartbeats',
        sa.Column('id', sa.String(length=200), nullable=False),
        sa.Column('host', sa.String(length=200), nullable=False),
        sa.Column('node', sa.String(length=200), nullable=False),
        sa.Column('queues', sa.JSON(), nullable=False),
        sa.Column('concurrency', sa.Integer(), nullable=False),
        sa.Column('run_ids', sa.JSON(), nullable=False),
        sa.Column('free_since', sa.DateTime(timezone=True), nullable=True),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_seen_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_worker_heartbeats')),
    )
    with op.batch_alter_table('worker_heartbeats', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_worker_heartbeats_host'), ['host'], unique=False)
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('reconcile_rounds', sa.Integer(), server_default='0', nullable=False)
        )
        batch_op.add_column(
            sa.Column('reconciled_at', sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column('reconcile_progress', sa.Integer(), server_default='0', nullable=False)
        )
    with op.batch_alter_table('recording_runs', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('claimed_by', sa.String(length=200), server_default='', nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table('recording_runs', schema=None) as batch_op:
        batch_op.drop_column('claimed_by')
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.drop_column('reconcile_progress')
        batch_op.drop_column('reconciled_at')
        batch_op.drop_column('reconcile_rounds')
    with op.batch_alter_table('worker_heartbeats', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_worker_heartbeats_host'))
    op.drop_table('worker_heartbeats')

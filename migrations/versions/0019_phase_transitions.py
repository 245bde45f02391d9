"""h2: phase_transitions, the phase lifecycle's events (a phase opening or closing), which
notifications consume instead of detecting them

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-12 10:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0019'
down_revision: Union[str, Sequence[str], None] = '0018'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # Empty at first: changes noticed before this migration were told already (their
    # notification events exist), so none is told again.
    op.create_table(
        'phase_transitions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('phase_id', sa.Integer(), nullable=False),
        sa.Column('seq', sa.Integer(), nullable=False),
        sa.Column('opened', sa.Boolean(), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['phase_id'], ['phases.id'],
            name=op.f('fk_phase_transitions_phase_id_phases'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_phase_transitions')),
        sa.UniqueConstraint('phase_id', 'seq', name=op.f('uq_phase_transitions_phase_id_seq')),
    )


def downgrade() -> None:
    op.drop_table('phase_transitions')

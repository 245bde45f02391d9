"""teams: teams and their members; an algorithm's team; the team charged for each version
and evaluation

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-11 10:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0018'
down_revision: Union[str, Sequence[str], None] = '0017'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

_CHARGED = ('algorithms', 'algorithm_versions', 'evaluations')


def upgrade() -> None:
    op.create_table(
        'teams',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=100), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_teams')),
        sa.UniqueConstraint('name', name=op.f('uq_teams_name')),
    )
    op.create_table(
        'team_members',
        sa.Column('team_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('role', sa.Enum(
            'owner', 'member', name='teamrole', native_enum=False, length=32,
        ), nullable=False),
        sa.Column('added_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['team_id'], ['teams.id'], name=op.f('fk_team_members_team_id_teams'),
            ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['user_id'], ['users.id'], name=op.f('fk_team_members_user_id_users'),
            ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('team_id', 'user_id', name=op.f('pk_team_members')),
    )
    with op.batch_alter_table('team_members', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_team_members_user_id'), ['user_id'], unique=False)
    # No foreign keys on these columns: adding one rebuilds the table on SQLite, and dropping
    # the old table there cascades (algorithms -> versions -> evaluations -> results).
    for table in _CHARGED:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('team_id', sa.Integer(), nullable=True))
            batch_op.create_index(batch_op.f(f'ix_{table}_team_id'), ['team_id'], unique=False)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == 'sqlite'
    for table in reversed(_CHARGED):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(batch_op.f(f'ix_{table}_team_id'))
        if sqlite:
            # SQLite's own DROP COLUMN (3.35+): batch mode would rebuild the table, and
            # dropping the old one cascades to the rows that refer to it.
            op.execute(f'ALTER TABLE {table} DROP COLUMN team_id')
        else:
            op.drop_column(table, 'team_id')
    with op.batch_alter_table('team_members', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_team_members_user_id'))
    op.drop_table('team_members')
    op.drop_table('teams')

"""leaderboard snapshots: boards frozen to be cited, immutable

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04 09:32:04

A snapshot is never changed or removed: a trigger refuses UPDATE and DELETE on the table,
on PostgreSQL and SQLite alike, so no code path (nor a hand-written statement) can alter
what a paper cites. Dropping the table (this downgrade) is the only way out.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0016'
down_revision: Union[str, Sequence[str], None] = '0015'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

MESSAGE = 'leaderboard snapshots are immutable'


def upgrade() -> None:
    op.create_table(
        'leaderboard_snapshots',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('dataset_version_id', sa.Integer(), nullable=False),
        sa.Column('dataset', sa.String(length=100), nullable=False),
        sa.Column('dataset_version', sa.String(length=100), nullable=False),
        sa.Column('content_sha256', sa.String(length=64), nullable=False),
        sa.Column('board', sa.JSON(), nullable=False),
        sa.Column('reason', sa.String(length=32), nullable=False),
        sa.Column('phase', sa.String(length=100), nullable=True),
        sa.Column('created_by_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['dataset_version_id'],
            ['dataset_versions.id'],
            name=op.f('fk_leaderboard_snapshots_dataset_version_id_dataset_versions'),
            ondelete='RESTRICT',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_leaderboard_snapshots')),
    )
    with op.batch_alter_table('leaderboard_snapshots', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_leaderboard_snapshots_dataset_version_id'),
            ['dataset_version_id'],
            unique=False,
        )
    if op.get_bind().dialect.name == 'postgresql':
        op.execute(
            "CREATE FUNCTION leaderboard_snapshots_immutable() RETURNS trigger "
            "LANGUAGE plpgsql AS $$ BEGIN "
            f"RAISE EXCEPTION '{MESSAGE}' USING ERRCODE = 'restrict_violation'; "
            "END $$"
        )
        op.execute(
            "CREATE TRIGGER leaderboard_snapshots_immutable "
            "BEFORE UPDATE OR DELETE ON leaderboard_snapshots "
            "FOR EACH ROW EXECUTE FUNCTION leaderboard_snapshots_immutable()"
        )
    else:
        for action in ('UPDATE', 'DELETE'):
            op.execute(
                f"CREATE TRIGGER leaderboard_snapshots_no_{action.lower()} "
                f"BEFORE {action} ON leaderboard_snapshots "
                f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
            )


def downgrade() -> None:
    # Dropping the table drops its triggers (both backends); then the function.
    with op.batch_alter_table('leaderboard_snapshots', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_leaderboard_snapshots_dataset_version_id'))
    op.drop_table('leaderboard_snapshots')
    if op.get_bind().dialect.name == 'postgresql':
        op.execute("DROP FUNCTION leaderboard_snapshots_immutable()")

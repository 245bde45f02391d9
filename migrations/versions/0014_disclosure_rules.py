"""disclosure: phases name their dataset versions, the Ladder, change counters

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-10 12:00:00

A phase's rules (disclosure, failed recordings, release) now apply only to the dataset
versions it names. Existing phases name the dataset versions their versions were already
evaluated on (full evaluations and re-scores, not smoke tests), when that data was
registered before the phase's closing date (or the phase has none): data registered after
a phase closed was never the phase's, and now follows its own dataset's level.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0014'
down_revision: Union[str, Sequence[str], None] = '0013'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'phase_dataset_versions',
        sa.Column('phase_id', sa.Integer(), nullable=False),
        sa.Column('dataset_version_id', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ['dataset_version_id'],
            ['dataset_versions.id'],
            name=op.f('fk_phase_dataset_versions_dataset_version_id_dataset_versions'),
            ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['phase_id'],
            ['phases.id'],
            name=op.f('fk_phase_dataset_versions_phase_id_phases'),
            ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint(
            'phase_id', 'dataset_version_id', name=op.f('pk_phase_dataset_versions')
        ),
    )
    with op.batch_alter_table('phase_dataset_versions', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_phase_dataset_versions_dataset_version_id'),
            ['dataset_version_id'],
            unique=False,
        )
    with op.batch_alter_table('phases', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                'release_rule',
                sa.Enum('exact', 'ladder', name='releaserule', native_enum=False, length=32),
                nullable=True,
            )
        )
        batch_op.add_column(sa.Column('ladder_step', sa.Float(), nullable=True))
    for table in ('algorithms', 'dataset_versions', 'evaluations'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(
                sa.Column('revision', sa.Integer(), server_default='0', nullable=False)
            )
    op.execute(
        """
        INSERT INTO phase_dataset_versions (phase_id, dataset_version_id)
        SELECT DISTINCT p.id, dv.id
        FROM phases p
        JOIN algorithm_versions av ON av.phase_id = p.id
        JOIN evaluations e ON e.algorithm_version_id = av.id
        JOIN dataset_versions dv ON dv.id = e.dataset_version_id
        WHERE e.kind != 'smoke_test'
          AND (p.closes_at IS NULL OR dv.created_at < p.closes_at)
        """
    )


def downgrade() -> None:
    for table in ('evaluations', 'dataset_versions', 'algorithms'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('revision')
    with op.batch_alter_table('phases', schema=None) as batch_op:
        batch_op.drop_column('ladder_step')
        batch_op.drop_column('release_rule')
    with op.batch_alter_table('phase_dataset_versions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_phase_dataset_versions_dataset_version_id'))
    op.drop_table('phase_dataset_versions')

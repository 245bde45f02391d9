"""recording runs record the image the engine started (image_id)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 10:00:00

A result is stored, and reused, only when the image that ran is the evaluation's version's
(szbench_worker.pipeline.attribution). Earlier results are marked as such where the worker
resolved the image from the version (every Celery and ``szbench serve`` worker did); the
results of ``szbench evaluate`` are not: it ran whichever image its own command named, so
a resumed or concurrent run may have stored another image's detections. Those rows stay
as they are but are never reused: the next evaluation runs those recordings again.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0015'
down_revision: Union[str, Sequence[str], None] = '0014'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('recording_runs') as batch:
        batch.add_column(sa.Column('image_id', sa.String(length=100), nullable=True))
    op.execute(
        """
        UPDATE recording_runs SET image_id = image_digest
        WHERE outcome IS NOT NULL
          AND outcome != 'infrastructure_error'
          AND evaluation_id NOT IN (
            SELECT evaluations.id FROM evaluations
            JOIN users ON users.id = evaluations.created_by_id
            WHERE users.email = 'local@szbench.invalid'
          )
        """
    )


def downgrade() -> None:
    with op.batch_alter_table('recording_runs') as batch:
        batch.drop_column('image_id')

"""workers on other hosts: registry digest of uploaded images, references in the database

Workers on hosts without the uploads volume pull an uploaded image by the digest the
platform recorded when it pushed it to SZBENCH_REGISTRY; those without the dataset files
score with the reference annotations copied here (backfilled from the files where this
migration runs, which is the main host).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04 10:00:00
"""
from typing import Sequence, Union

from pathlib import Path

from alembic import op
import sqlalchemy as sa

_MAX_BYTES = 1024**2


revision: str = '0017'
down_revision: Union[str, Sequence[str], None] = '0016'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column(
        'algorithm_versions', sa.Column('registry_digest', sa.String(length=100), nullable=True)
    )
    op.add_column('recordings', sa.Column('reference_tsv', sa.Text(), nullable=True))
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            'SELECT r.id, v.path, r.annotations_path FROM recordings r '
            'JOIN dataset_versions v ON v.id = r.dataset_version_id'
        )
    ).all()
    for rec_id, base, rel in rows:
        path = Path(base) / rel
        try:
            if path.stat().st_size > _MAX_BYTES:
                continue
            text = path.read_text(encoding='utf-8')
        except (OSError, UnicodeDecodeError):
            continue  # not on this host: scoring reads the file where it is
        conn.execute(
            sa.text('UPDATE recordings SET reference_tsv = :t WHERE id = :i'),
            {'t': text, 'i': rec_id},
        )


def downgrade() -> None:
    op.drop_column('recordings', 'reference_tsv')
    op.drop_column('algorithm_versions', 'registry_digest')

"""registry digest of uploaded images (workers on other hosts pull by it)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 10:00:00
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0015'
down_revision: Union[str, Sequence[str], None] = '0014'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column(
        'algorithm_versions', sa.Column('registry_digest', sa.String(length=100), nullable=True)
    )


def downgrade() -> None:
    op.drop_column('algorithm_versions', 'registry_digest')

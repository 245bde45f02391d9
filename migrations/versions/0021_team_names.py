"""team names are no longer unique across the platform: a refusal because of a team the
creator cannot see would tell them it exists (issue 28.8); a name may not read as one of the
creator's own teams' instead (checked by the service, szbench.names)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-14 10:00:00

"""
from typing import Sequence, Union

from alembic import op


revision: str = '0021'
down_revision: Union[str, Sequence[str], None] = '0020'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # On SQLite batch mode copies the table (foreign keys are off during migrations:
    # migrations/env.py), so the memberships and every team_id stay.
    with op.batch_alter_table('teams') as batch:
        batch.drop_constraint(op.f('uq_teams_name'), type_='unique')


def downgrade() -> None:
    # Fails where two teams now share a name: rename one first.
    with op.batch_alter_table('teams') as batch:
        batch.create_unique_constraint(op.f('uq_teams_name'), ['name'])

"""h6 federation: centres and their keys, external results and refusals (hub side);
subscriptions, federated datasets, hub versions and outgoing bundles (centre side); an
algorithm's external_evaluation choice

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04 20:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0020'
down_revision: Union[str, Sequence[str], None] = '0019'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def _kind() -> sa.Enum:
    return sa.Enum('result', 'withdrawal', name='bundlekind', native_enum=False, length=32)


def upgrade() -> None:
    with op.batch_alter_table('algorithms', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('external_evaluation', sa.Boolean(), server_default='0', nullable=False)
        )
    op.create_table(
        'centres',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=100), nullable=False),
        sa.Column('title', sa.String(length=200), nullable=False),
        sa.Column('contact', sa.String(length=320), nullable=False),
        sa.Column('last_sequence', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_centres')),
        sa.UniqueConstraint('name', name=op.f('uq_centres_name')),
    )
    op.create_table(
        'centre_keys',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('centre_id', sa.Integer(), nullable=False),
        sa.Column('public_key', sa.String(length=64), nullable=False),
        sa.Column('fingerprint', sa.String(length=80), nullable=False),
        sa.Column('state', sa.Enum(
            'active', 'retired', 'revoked', name='keystate', native_enum=False, length=32,
        ), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('retired_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ['centre_id'], ['centres.id'], name=op.f('fk_centre_keys_centre_id_centres'),
            ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_centre_keys')),
        sa.UniqueConstraint('fingerprint', name=op.f('uq_centre_keys_fingerprint')),
    )
    with op.batch_alter_table('centre_keys', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_centre_keys_centre_id'), ['centre_id'], unique=False)
    op.create_table(
        'external_results',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('centre_id', sa.Integer(), nullable=False),
        sa.Column('key_id', sa.Integer(), nullable=False),
        sa.Column('sequence', sa.Integer(), nullable=False),
        sa.Column('kind', _kind(), nullable=False),
        sa.Column('payload', sa.Text(), nullable=False),
        sa.Column('payload_sha256', sa.String(length=64), nullable=False),
        sa.Column('signature', sa.String(length=100), nullable=False),
        sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('algorithm_version_id', sa.Integer(), nullable=True),
        sa.Column('dataset', sa.String(length=100), nullable=False),
        sa.Column('withdraws_sequence', sa.Integer(), nullable=True),
        sa.Column('withdrawn_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('withdrawn_by_sequence', sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ['algorithm_version_id'], ['algorithm_versions.id'],
            name=op.f('fk_external_results_algorithm_version_id_algorithm_versions'),
        ),
        sa.ForeignKeyConstraint(
            ['centre_id'], ['centres.id'], name=op.f('fk_external_results_centre_id_centres'),
        ),
        sa.ForeignKeyConstraint(
            ['key_id'], ['centre_keys.id'], name=op.f('fk_external_results_key_id_centre_keys'),
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_external_results')),
        sa.UniqueConstraint(
            'centre_id', 'sequence', name=op.f('uq_external_results_centre_id_sequence')
        ),
        sa.UniqueConstraint('payload_sha256', name=op.f('uq_external_results_payload_sha256')),
    )
    with op.batch_alter_table('external_results', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_external_results_centre_id'), ['centre_id'], unique=False
        )
        batch_op.create_index(
            batch_op.f('ix_external_results_algorithm_version_id'),
            ['algorithm_version_id'], unique=False,
        )
    op.create_table(
        'bundle_refusals',
        sa.Column('centre', sa.String(length=100), nullable=False),
        sa.Column('reason', sa.String(length=40), nullable=False),
        sa.Column('count', sa.Integer(), nullable=False),
        sa.Column('last_detail', sa.String(length=500), nullable=False),
        sa.Column('last_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('centre', 'reason', name=op.f('pk_bundle_refusals')),
    )
    op.create_table(
        'hub_subscriptions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('hub_url', sa.String(length=500), nullable=False),
        sa.Column('centre_name', sa.String(length=100), nullable=False),
        sa.Column('follow_new', sa.Boolean(), nullable=False),
        sa.Column('last_sequence', sa.Integer(), nullable=False),
        sa.Column('hub_registry', sa.String(length=300), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('created_by_id', sa.Integer(), nullable=True),
        sa.Column('last_synced_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('last_sync_error', sa.String(length=500), nullable=False),
        sa.ForeignKeyConstraint(
            ['created_by_id'], ['users.id'],
            name=op.f('fk_hub_subscriptions_created_by_id_users'),
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_hub_subscriptions')),
        sa.UniqueConstraint('hub_url', name=op.f('uq_hub_subscriptions_hub_url')),
    )
    op.create_table(
        'federated_datasets',
        sa.Column('subscription_id', sa.Integer(), nullable=False),
        sa.Column('dataset_id', sa.Integer(), nullable=False),
        sa.Column('auto_publish', sa.Boolean(), nullable=False),
        sa.Column('min_subjects', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ['dataset_id'], ['datasets.id'],
            name=op.f('fk_federated_datasets_dataset_id_datasets'), ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['subscription_id'], ['hub_subscriptions.id'],
            name=op.f('fk_federated_datasets_subscription_id_hub_subscriptions'),
            ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint(
            'subscription_id', 'dataset_id', name=op.f('pk_federated_datasets')
        ),
    )
    op.create_table(
        'hub_versions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('subscription_id', sa.Integer(), nullable=False),
        sa.Column('hub_version_id', sa.Integer(), nullable=False),
        sa.Column('hub_algorithm_id', sa.Integer(), nullable=False),
        sa.Column('algorithm', sa.String(length=100), nullable=False),
        sa.Column('version', sa.String(length=100), nullable=False),
        sa.Column('image_digest', sa.String(length=100), nullable=False),
        sa.Column('registry_digest', sa.String(length=100), nullable=False),
        sa.Column('offered', sa.Boolean(), nullable=False),
        sa.Column('followed', sa.Boolean(), nullable=False),
        sa.Column('algorithm_version_id', sa.Integer(), nullable=True),
        sa.Column('first_seen_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['algorithm_version_id'], ['algorithm_versions.id'],
            name=op.f('fk_hub_versions_algorithm_version_id_algorithm_versions'),
            ondelete='SET NULL',
        ),
        sa.ForeignKeyConstraint(
            ['subscription_id'], ['hub_subscriptions.id'],
            name=op.f('fk_hub_versions_subscription_id_hub_subscriptions'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_hub_versions')),
        sa.UniqueConstraint(
            'subscription_id', 'hub_version_id',
            name=op.f('uq_hub_versions_subscription_id_hub_version_id'),
        ),
    )
    with op.batch_alter_table('hub_versions', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_hub_versions_subscription_id'), ['subscription_id'], unique=False
        )
    op.create_table(
        'outgoing_bundles',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('subscription_id', sa.Integer(), nullable=False),
        sa.Column('sequence', sa.Integer(), nullable=False),
        sa.Column('kind', _kind(), nullable=False),
        sa.Column('evaluation_id', sa.Integer(), nullable=True),
        sa.Column('withdraws_id', sa.Integer(), nullable=True),
        sa.Column('payload', sa.Text(), nullable=False),
        sa.Column('payload_sha256', sa.String(length=64), nullable=False),
        sa.Column('signature', sa.String(length=100), nullable=False),
        sa.Column('state', sa.Enum(
            'draft', 'sent', 'refused', 'discarded', name='outgoingstate', native_enum=False,
            length=32,
        ), nullable=False),
        sa.Column('auto', sa.Boolean(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('approved_by_id', sa.Integer(), nullable=True),
        sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('hub_answer', sa.String(length=1000), nullable=False),
        sa.Column('withdrawn_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ['approved_by_id'], ['users.id'],
            name=op.f('fk_outgoing_bundles_approved_by_id_users'),
        ),
        sa.ForeignKeyConstraint(
            ['evaluation_id'], ['evaluations.id'],
            name=op.f('fk_outgoing_bundles_evaluation_id_evaluations'), ondelete='SET NULL',
        ),
        sa.ForeignKeyConstraint(
            ['subscription_id'], ['hub_subscriptions.id'],
            name=op.f('fk_outgoing_bundles_subscription_id_hub_subscriptions'),
            ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['withdraws_id'], ['outgoing_bundles.id'],
            name=op.f('fk_outgoing_bundles_withdraws_id_outgoing_bundles'),
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_outgoing_bundles')),
        sa.UniqueConstraint(
            'subscription_id', 'sequence',
            name=op.f('uq_outgoing_bundles_subscription_id_sequence'),
        ),
    )
    with op.batch_alter_table('outgoing_bundles', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_outgoing_bundles_subscription_id'), ['subscription_id'], unique=False
        )
        batch_op.create_index(
            batch_op.f('ix_outgoing_bundles_evaluation_id'), ['evaluation_id'], unique=False
        )
        batch_op.create_index(batch_op.f('ix_outgoing_bundles_state'), ['state'], unique=False)


def downgrade() -> None:
    for table in (
        'outgoing_bundles', 'hub_versions', 'federated_datasets', 'hub_subscriptions',
        'bundle_refusals', 'external_results', 'centre_keys', 'centres',
    ):
        op.drop_table(table)
    if op.get_bind().dialect.name == 'sqlite':
        # SQLite's own DROP COLUMN: batch mode would rebuild the table, and dropping the old
        # one cascades to the rows that refer to it (migration 0018 says why).
        op.execute('ALTER TABLE algorithms DROP COLUMN external_evaluation')
    else:
        op.drop_column('algorithms', 'external_evaluation')

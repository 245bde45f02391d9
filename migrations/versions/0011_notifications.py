"""notifications: preferences, events, the deliveries outbox, phase states

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-10 10:00:00

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0011'
down_revision: Union[str, Sequence[str], None] = '0010'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'notification_preferences',
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('webhook_url', sa.String(length=2000), nullable=False),
        sa.Column('webhook_secret', sa.String(length=200), nullable=False),
        sa.Column('muted', sa.JSON(), nullable=False),
        sa.Column('all_phases', sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ['user_id'], ['users.id'],
            name=op.f('fk_notification_preferences_user_id_users'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('user_id', name=op.f('pk_notification_preferences')),
    )
    op.create_table(
        'notification_events',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('kind', sa.Enum(
            'smoke_test_failed', 'evaluation_finished', 'evaluation_failed', 'phase_opened',
            'phase_closed', 'test', name='notificationkind', native_enum=False, length=32,
        ), nullable=False),
        sa.Column('key', sa.String(length=200), nullable=False),
        sa.Column('evaluation_id', sa.Integer(), nullable=True),
        sa.Column('algorithm_version_id', sa.Integer(), nullable=True),
        sa.Column('phase_id', sa.Integer(), nullable=True),
        sa.Column('user_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('fanned_out_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ['algorithm_version_id'], ['algorithm_versions.id'],
            name=op.f('fk_notification_events_algorithm_version_id_algorithm_versions'),
            ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['evaluation_id'], ['evaluations.id'],
            name=op.f('fk_notification_events_evaluation_id_evaluations'), ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['phase_id'], ['phases.id'],
            name=op.f('fk_notification_events_phase_id_phases'), ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['user_id'], ['users.id'],
            name=op.f('fk_notification_events_user_id_users'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_notification_events')),
        sa.UniqueConstraint('key', name=op.f('uq_notification_events_key')),
    )
    with op.batch_alter_table('notification_events', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_notification_events_fanned_out_at'), ['fanned_out_at'], unique=False
        )
    op.create_table(
        'notification_deliveries',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('event_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('channel', sa.Enum(
            'mail', 'webhook', name='notificationchannel', native_enum=False, length=32,
        ), nullable=False),
        sa.Column('status', sa.Enum(
            'pending', 'delivered', 'failed', name='deliverystatus', native_enum=False,
            length=32,
        ), nullable=False),
        sa.Column('payload', sa.JSON(), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('target', sa.String(length=2000), nullable=False),
        sa.Column('last_status_code', sa.Integer(), nullable=True),
        sa.Column('last_error', sa.String(length=500), nullable=False),
        sa.Column('response_snippet', sa.String(length=500), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_attempt_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ['event_id'], ['notification_events.id'],
            name=op.f('fk_notification_deliveries_event_id_notification_events'),
            ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['user_id'], ['users.id'],
            name=op.f('fk_notification_deliveries_user_id_users'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_notification_deliveries')),
        sa.UniqueConstraint(
            'event_id', 'user_id', 'channel',
            name=op.f('uq_notification_deliveries_event_id_user_id_channel'),
        ),
    )
    with op.batch_alter_table('notification_deliveries', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_notification_deliveries_event_id'), ['event_id'], unique=False
        )
        batch_op.create_index(
            batch_op.f('ix_notification_deliveries_next_attempt_at'), ['next_attempt_at'],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f('ix_notification_deliveries_user_id'), ['user_id'], unique=False
        )
    op.create_table(
        'phase_states',
        sa.Column('phase_id', sa.Integer(), nullable=False),
        sa.Column('is_open', sa.Boolean(), nullable=True),
        sa.Column('changes', sa.Integer(), nullable=False),
        sa.Column('changed_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['phase_id'], ['phases.id'],
            name=op.f('fk_phase_states_phase_id_phases'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('phase_id', name=op.f('pk_phase_states')),
    )
    # Phases made before notifications existed: their state is unknown (is_open NULL), so
    # the first look records it without telling anyone; a phase without a row is new.
    op.execute(
        "INSERT INTO phase_states (phase_id, is_open, changes, changed_at) "
        "SELECT id, NULL, 0, CURRENT_TIMESTAMP FROM phases"
    )


def downgrade() -> None:
    op.drop_table('phase_states')
    with op.batch_alter_table('notification_deliveries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_notification_deliveries_user_id'))
        batch_op.drop_index(batch_op.f('ix_notification_deliveries_next_attempt_at'))
        batch_op.drop_index(batch_op.f('ix_notification_deliveries_event_id'))
    op.drop_table('notification_deliveries')
    with op.batch_alter_table('notification_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_notification_events_fanned_out_at'))
    op.drop_table('notification_events')
    op.drop_table('notification_preferences')

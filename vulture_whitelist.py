"""Names the dead-code check (vulture, ``make lint``) must not report: each is used, but by
something vulture cannot see. Add a name here only with the reason; dead code goes instead.

Vulture matches by name, so ``_.name`` stands for an attribute of any object.
"""

# ruff: noqa: B018
# mypy: ignore-errors

_ = object()

# Pydantic and pydantic-settings read these class attributes.
_.model_config
# SQLAlchemy's declarative base reads these.
_.metadata
_.type_annotation_map

# ORM columns that only the API's schemas and the templates read.
_.tarball_bytes
_.event_precision
_.sample_sensitivity
_.sample_precision
_.sample_f1
_.sample_fp_rate

# Enum members: values stored in the database and accepted by the API.
_.ALGORITHM  # szbench_worker.faults.Blame: the algorithm's fault is an outcome, never raised
_.CENTRE
_.PRIVATE
_.RETIRED

# Facts of an image archive and of a standardised recording, kept on the records (and read
# by tests and logs) though the code decides nothing on them.
_.architecture
_.repo_tags
_.source_path
_.output_path

# What a pipeline step did, for its log line and the tests.
_.enqueued
_.skipped
_.ran_container
_.evaluations_queued
_.phase_events
# When a phase's state last changed (szbench.models.PhaseState): for operators reading the table.
_.changed_at

# Framework hooks: uvicorn's app factory (docker/api.Dockerfile), Celery's Task.on_failure
# and its arguments, the embedded worker's consumer bootstep, prometheus_client's
# Collector.describe, FastAPI's security scheme name, Typer's Rich switch, NumPy's flags.
_.create_production_app
_.on_failure
_.einfo
_.on_consumer_ready
_.describe
_.scheme_name
_.HAS_RICH
_.writeable
# The io protocol (RawIOBase.writable) and tarfile's member fields, read by the standard library.
_.writable
_.uname
_.gname
# The Celery client's connection pools, dropped so that a changed broker URL takes effect.
_._pool
_._producer_pool
# Celery tasks, registered by name through the project's task decorator.
_.reconcile_pipeline
_.deliver_notification
_.notifications_tick
_.phases_tick

# Public API of the scorer library (szbench_scoring.Metrics), for its users.
_.as_dict

# Hooks for tests: clear the read caches, capture what is enqueued, move a throttle's clock,
# ask whether the embedded worker still runs, locate a prepared recording's files.
_.clear_cache
_.set_sender
_.advance
_.alive
_.eeg_file
_.annotations_file

# Fields of the stamped caches' facts (change counters, phases closed now): compared as a
# whole, read by name for debugging.
_.dataset_revisions
_.phases_closed

# prometheus_client calls a registered collector's collect() (szbench.ops.service).
_.collect

# io.RawIOBase methods that io.BufferedReader and tarfile call on the image check's metered
# streams (szbench.algorithms.image_check._ArchiveFile, _Expanded).
_.readable
_.seekable

# Read by the libraries: sqlite3's connection (transactions begun by szbench.db) and kombu's
# virtual transport (szbench.embedded_transport).
_.isolation_level
_.polling_interval

# What a recording fetch cost (szbench_worker.recordings.Located), for callers and tests
# that account for fetched bytes (tests/worker/test_recording_cache.py, the fetch benchmark).
_.fetched_bytes
# The recording cache's disk in a sentence, for the host's health check (issue 29.2: a host
# whose cache disk is full takes no run); tests/worker/test_recording_cache.py drives it.
_.cache_fault
# Jinja reads the environment's finalize (szbench.web.common.isolate_bidi).
_.finalize
# The timing bound that docs/security.md states (its doctest and tests compute it).
_.timing_bits_per_evaluation

# httpcore and smtplib call these on the network backend, stream and client we give them
# (szbench.outbound).
_.connect_tcp
_.connect_unix_socket
_.start_tls
_.get_extra_info
_._get_socket
# Federation (szbench.federation): fields of the bundle's pydantic models (its byte format)
# and columns kept for the record (who approved a bundle, when a version was first seen, the
# key a result was signed with, a withdrawal's target), read by the pages and the API or by
# people reading the database; celery finds the federation tick by its name.
_.montage
_.manifest_sha256
_.approved_by_id
_.last_at
_.withdraws_sequence
_.key_id
_.first_seen_at
_.federation_tick
# The bound docs/security.md states for a published result (its doctest and test compute it).
_.bits_per_result
# SQLAlchemy's TypeDecorator protocol (szbench.models.UTCDateTime): the ORM calls these.
_.impl
_.cache_ok
_.process_bind_param
_.process_result_value

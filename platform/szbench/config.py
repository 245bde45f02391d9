"""All runtime configuration, read from the environment (prefix ``SZBENCH_``).

Every setting an operator may want to change lives here and is documented in
``.env.example``; code reads it through :func:`get_settings`, which tests override with
``get_settings.cache_clear()`` after changing the environment.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from szbench.errors import BadRequest
from szbench.links import check_link

# In SZBENCH_FORWARDED_ALLOW_IPS: the container's default gateway (szbench.api.proxies).
GATEWAY = "gateway"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SZBENCH_", env_file=".env", extra="ignore")

    # Where the embedded mode keeps its database, uploads, datasets and run outputs.
    data_dir: Path = Path.home() / ".szbench"
    # SQLAlchemy URL; empty means SQLite under data_dir (the embedded default).
    database_url: str = ""
    # Celery broker; empty means the embedded mode (tasks run in-process, no Redis).
    broker_url: str = ""

    # Container runner: the limits every algorithm run gets (see docs/algorithm-contract.md).
    # The challenge's reference per 1 h recording is 10 cores, 40 GB, 1 GPU, 15 min.
    runner_backend: str = "auto"  # auto | docker | local (trusted local process, demo only)
    runner_memory_bytes: int = 8 * 1024**3  # RAM, and RAM+swap (no swap)
    runner_cpus: float = 2.0
    runner_pids: int = 512  # processes and threads inside the container
    runner_timeout_s: float = 900.0  # wall clock per recording, then the container is killed
    # /tmp, and each VOLUME path the image declares (tmpfs: counts against the memory limit)
    runner_tmpfs_bytes: int = 512 * 1024**2
    runner_output_bytes: int = 16 * 1024**2  # everything the run writes to /output
    runner_output_files: int = 1000  # files and folders the run may make in /output
    # Image of the short-lived containers that delete what a run left in /output when the
    # worker may not (not root, watched directory); it needs `rm`. Empty: the run's image.
    # Resolved to an image id once per worker process, so a name moved later changes nothing.
    runner_helper_image: str = ""
    runner_log_bytes: int = 1024**2  # container logs kept for admins (the tail)
    # The tail of that log its owner sees on a public-sample run (never on held-out data).
    owner_log_tail_chars: int = 20_000
    runner_user: str = ""  # uid[:gid] inside the container; empty keeps the image's user
    runner_gpus: str = ""  # comma-separated GPU ids this worker owns, e.g. "0" or "GPU-uuid"
    runner_cpu_pool: str = ""  # cores runs are pinned to ("0-15"); empty: own; "none": off
    # Where the runners of a host serialise their claims of cores: one directory per host,
    # outside every work and data directory, so that runs of different data dirs (two
    # `szbench evaluate`, a worker) never share a core. Compose mounts the host's.
    runner_cpu_lock_dir: Path = Path("/run/lock/szbench-cpus")
    runner_work_dir: Path | None = None  # per-run staging; default data_dir / "runs"
    runner_output_tmpfs: bool | None = None  # /output as a size-capped tmpfs; None: when root
    runner_local_command: str = "python3 examples/baseline/detect.py"  # for runner_backend=local
    # --- Platform API (auth, uploads, leaderboards) ---
    # Signs the web session cookie; empty means a random key kept in data_dir/secret_key.
    secret_key: str = ""
    # scrypt cost for password hashes (N, a power of two); stored with each hash.
    password_scrypt_n: int = 2**14
    # Passwords (sign-up, changes, admin-set, CLI): at least this many characters, and none of
    # the 30,000 most common passwords (zxcvbn's list).
    password_min_length: int = 10
    # Sign-in throttling (docs/security.md): past this many failed sign-ins for one account
    # (one client address) each attempt doubles the wait before the next one may be made,
    # from signin_backoff_base_s up to signin_backoff_max_s; early attempts get 429 with
    # Retry-After. Failures are forgotten after signin_failure_memory_s without an attempt.
    signin_free_failures_per_account: int = 5
    signin_free_failures_per_client: int = 20
    signin_backoff_base_s: float = 1.0
    signin_backoff_max_s: float = 900.0
    signin_failure_memory_s: float = 86400.0
    # Lifetime of the bearer token that POST /api/v1/auth/login returns (seconds).
    login_token_ttl_s: int = 7 * 86400
    session_cookie_name: str = "szbench_session"
    # Peers whose X-Forwarded-For / X-Forwarded-Proto are believed (comma-separated IP
    # addresses or networks; "gateway": the container's default gateway, where a proxy on the
    # docker host comes from). The client is the right-most address in X-Forwarded-For that
    # is none of these (the documented nginx appends the address it saw); the sign-in and
    # sign-up throttles key on it. Never "*": any client could then name itself.
    forwarded_allow_ips: str = "127.0.0.1,::1"
    # Set true behind TLS so browsers send the session cookie over HTTPS only.
    session_cookie_secure: bool = False
    # Anyone may create a researcher account (off in centre mode).
    allow_signup: bool = True
    # Sign-ups per client address (an IPv6 /64), each of which brings its own daily quotas:
    # past this many, each sign-up (an address that has an account counts too) doubles the
    # wait before the next one, from signup_backoff_base_s up to signup_backoff_max_s; 429
    # with Retry-After meanwhile. A client is forgotten after signin_failure_memory_s
    # without a sign-up. Defaults: at most 6 sign-ups from one address in any 24 h.
    signup_free_per_client: int = 2
    signup_backoff_base_s: float = 7200.0
    signup_backoff_max_s: float = 86400.0
    # Accounts (docs/security.md, "Accounts"). A password reset link (admin-issued, or
    # e-mailed when SMTP is configured) works once and for this long (seconds).
    password_reset_ttl_s: int = 86400
    # An e-mailed address verification link works for this long (seconds).
    email_verification_ttl_s: int = 7 * 86400
    # At most one reset e-mail per account per this many seconds ("forgot password").
    password_reset_mail_interval_s: int = 300
    # The site's address as users reach it (e.g. https://bench.example.org): every link the
    # server sends or shows (reset and verification links) is built from it, never from the
    # request's Host header, which the caller writes. Required when SMTP is configured (the
    # server refuses to start without it); empty without e-mail: admin-issued reset links
    # are then shown as a path to put after the site's address.
    public_url: str = ""
    # Outgoing e-mail. Empty smtp_host: no e-mail at all (admins hand out reset links).
    # With a host, sign-ups get a verification link and must verify before submitting, and
    # anyone can ask for a reset link by e-mail.
    smtp_host: str = ""
    smtp_port: int = 587
    smtp_username: str = ""
    smtp_password: str = ""
    # STARTTLS after connecting (port 587); false: plain SMTP (a local relay).
    smtp_starttls: bool = True
    smtp_timeout_s: float = 10.0
    mail_from: str = "szbench <noreply@localhost>"
    # Signed-out visitors may read public leaderboards, algorithms and datasets.
    anonymous_read: bool = True
    # Uploaded image tarballs and resumable upload sessions; empty means data_dir/uploads.
    uploads_dir: Path | None = None
    max_upload_bytes: int = 20 * 1024**3
    # Bytes per PUT of the web UI's resumable upload: larger keeps a fast link busy, smaller
    # loses less after a dropped connection.
    web_upload_chunk_bytes: int = 8 * 1024**2
    # Unfinished upload sessions older than this are refused and may be deleted.
    upload_session_ttl_s: int = 2 * 86400
    # Per user: open upload sessions at a time, and the bytes they may declare together.
    upload_max_open_sessions: int = 4
    upload_max_open_bytes: int = 40 * 1024**3
    # A refused upload (its archive failed the check, which cost the API the reading of it)
    # counts as one of those open sessions for this long after the refusal, so that a
    # user's refused checks are at most upload_max_open_sessions per this many seconds.
    upload_refusal_memory_s: int = 3600
    # The served API removes expired and refused uploads this often (seconds; 0: never, then
    # run `szbench upload sweep` from cron). Also at start-up.
    upload_sweep_interval_s: float = 3600.0
    # Image archives, checked while they are read (upload, `szbench evaluate --tar`, and
    # again before `docker load`): members of the archive, the bytes they expand to, files in
    # all layers together, and the bytes of those files (about the size of the loaded image).
    archive_max_members: int = 10_000
    archive_max_expanded_bytes: int = 40 * 1024**3
    image_max_layer_members: int = 1_000_000
    image_max_bytes: int = 40 * 1024**3
    # Decompressing (a .tar.gz, gzip/bzip2/xz layers) may make at most this many times the
    # bytes read of the archive so far, past its first 32 MiB: a decompression bomb costs
    # that much work before it is refused, not the size it claims. Images compress 2-5x.
    archive_max_expansion_ratio: float = 32.0
    # Accept images whose configured user is root (the worker still drops capabilities).
    allow_root_images: bool = False
    # Algorithm versions a user may submit per rolling 24 h across phases (empty: no limit).
    submissions_per_day: int | None = None
    # Full passes over held-out data a user may start per rolling 24 h: each new version and
    # each re-run or requested evaluation on a held-out dataset is one (admins: no limit;
    # empty: no limit). Bounds what a submitter can learn about the held-out set per day.
    held_out_runs_per_day: int | None = 5
    # Leaderboard responses and statistics are cached at most this long (seconds); new,
    # finished, published or hidden results show at once (the cache key changes), other
    # edits such as an algorithm's title within this time.
    leaderboard_cache_s: float = 600.0
    # The same for an evaluation's result and subjects and an algorithm's results: answers
    # are rebuilt when the evaluation's (or algorithm's) facts change, or after this long.
    results_cache_s: float = 600.0
    # Anonymous cached reads (leaderboards, results) are `Cache-Control: public` for this
    # many seconds: a browser or reverse proxy may serve them that long without asking.
    public_max_age_s: int = 10
    bootstrap_resamples: int = 1000
    # Bootstrap intervals and rank stability resample the per-subject figures; over fewer
    # subjects than this they would give those figures away, so where a held-out dataset
    # does not disclose per-subject figures non-admins see them only from this many on.
    intervals_min_subjects: int = 10
    # Where a held-out dataset discloses aggregate figures only, non-admins get the ratio
    # metrics rounded to this many decimals (FP/day on a fixed grid): each released figure
    # then carries a known number of bits about the held-out data (docs/security.md).
    released_decimals: int = Field(default=2, ge=0, le=6)
    # The Ladder's step for phases that release scores by it without a step of their own:
    # a released score moves only by beating the submitter's best by this much.
    ladder_step: float = Field(default=0.01, gt=0, le=0.5)
    bootstrap_seed: int = 0
    confidence_level: float = 0.95
    # Random sign flips of the paired permutation test on the comparison page, used past 16
    # subjects (up to 16 every flip is enumerated and the p-value is exact).
    compare_permutations: int = 10000

    # --- Evaluation pipeline (docs/pipeline.md) -------------------------------------------
    # Redis re-delivers a task whose worker vanished without acknowledging it after this
    # long. It must exceed the longest run (runner timeout + image load + scoring), or a
    # healthy long run is delivered twice (harmless thanks to idempotency, but wasteful).
    queue_visibility_timeout_s: int = 7200
    # Retries of infrastructure faults only (engine unreachable, database connection lost),
    # with exponential backoff capped at task_retry_backoff_max_s.
    task_max_retries: int = 8
    task_retry_backoff_max_s: int = 600
    # Worker heartbeats and the reconciler (docs/operations.md, "Nothing hangs"). Each worker
    # records a heartbeat this often; one not heard from for worker_heartbeat_timeout_s is
    # dead, and the runs it claimed are sent again.
    worker_heartbeat_interval_s: float = 15.0
    worker_heartbeat_timeout_s: float = 90.0
    # A worker stops taking runs while its work directories (RUNNER_WORK_DIR,
    # PIPELINE_WORK_DIR) have less free space than this, and goes on when they have it again;
    # a run that fails for want of it would only spend the algorithm's retries.
    worker_min_free_bytes: int = 1024**3
    # How often celery beat sends the reconcile task (to the maintenance queue).
    reconcile_interval_s: float = 60.0
    # Unfinished work is sent again once a live worker of its queue has had a free slot for
    # this long (so its queue holds nothing: the task was lost, not waiting) and nothing of
    # the evaluation moved meanwhile. Also the least time between two rounds.
    reconcile_stale_s: float = 300.0
    # A run claimed by a live worker that no longer holds it (its retries gave up while the
    # database was away) is sent again after this long; it must exceed
    # task_retry_backoff_max_s, or a run waiting for its next retry is sent twice.
    reconcile_claim_grace_s: float = 900.0
    # Rounds in a row without progress after which the evaluation ends FAILED.
    reconcile_max_rounds: int = 5
    # Tasks at a time in the embedded (in-process, SQLite-backed queue) worker.
    embedded_concurrency: int = 1
    # Slug of the public-sample dataset whose first recording smoke-tests each new algorithm
    # version; empty or absent: versions are activated without a smoke test (logged).
    smoke_test_dataset: str = "public-sample"
    # Staged recordings and run outputs; default data_dir / "work".
    pipeline_work_dir: Path | None = None

    # --- Notifications (docs/api.md "Notifications", docs/security.md) ---------------------
    # How often celery beat sends the notifications tick (maintenance queue), and how often
    # the embedded worker runs it: it notices phases opening or closing by date, and sends
    # deliveries that are due (retries, and any whose task was lost).
    notify_interval_s: float = 30.0
    # Attempts per delivery (mail or webhook) before it is marked failed; the n-th retry
    # waits notify_backoff_base_s * 2**(n-1), at most notify_backoff_max_s.
    notify_max_attempts: int = 6
    notify_backoff_base_s: float = 60.0
    notify_backoff_max_s: float = 3600.0
    # Whole time one webhook call may take (connect, send, first bytes of the answer).
    webhook_timeout_s: float = 10.0
    # Networks (CIDR, comma-separated) a webhook may reach although they are not public
    # internet addresses, e.g. "10.20.0.0/16" for an intranet chat server. Empty: public
    # addresses only (private, loopback and link-local ones are refused: a webhook URL is
    # chosen by any user, and must not become a way to probe the platform's own network).
    # In centre mode webhooks reach these networks only (none when empty).
    webhook_allowed_networks: str = ""
    # Plain http:// webhook URLs, to the networks above only (never across the internet).
    webhook_allow_http: bool = False

    # Logs (szbench.logging): level name, and "text" for a terminal or "json" for collectors.
    log_level: str = "INFO"
    log_format: str = "text"  # text | json
    # /metrics counts runs by outcome and duration across the platform: on a quiet one that
    # shows each held-out run's outcome, so it is served only to a scraper holding this token.
    metrics_token: str = ""
    # Clinical-centre mode: no public sign-up and nothing is pushed off the host (no outbound
    # publishing of results, no notification e-mails, webhooks only to the networks in
    # webhook_allowed_networks); see docs/self-hosting.md.
    centre_mode: bool = False
    # Which algorithm images may run, comma-separated; empty allows every image. Each entry is
    # an image digest ("sha256:<64 hex>") or a reference prefix ("localhost:5000/approved/").
    # An image runs when its digest is listed or its reference starts with a listed prefix.
    allowed_images: str = ""

    @field_validator("webhook_allowed_networks")
    @classmethod
    def _networks_parse(cls, value: str) -> str:
        # A typo here would otherwise surface as a failed webhook call much later.
        for part in value.split(","):
            if part.strip():
                try:
                    ipaddress.ip_network(part.strip(), strict=False)
                except ValueError as exc:
                    raise ValueError(f"not a network in CIDR form: {part.strip()!r}") from exc
        return value

    @field_validator("public_url")
    @classmethod
    def _site_address(cls, value: str) -> str:
        # Links into the site are this plus a path: an address with its own path, query,
        # fragment or credentials would send them somewhere else (docs/security.md).
        try:
            url = check_link("SZBENCH_PUBLIC_URL", value)
        except BadRequest as exc:
            raise ValueError(exc.detail) from None
        parts = urlsplit(url)
        if parts.path.strip("/") or parts.query or parts.fragment or url.endswith(("?", "#")):
            raise ValueError(
                f"SZBENCH_PUBLIC_URL: {url!r} must be the site's address alone "
                "(scheme and host, e.g. https://bench.example.org), without a path, query "
                "or fragment"
            )
        return url.rstrip("/")

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _proxy_addresses(cls, value: str) -> str:
        for entry in (e.strip() for e in value.split(",")):
            if not entry or entry == GATEWAY:
                continue
            if entry == "*":
                raise ValueError(
                    "SZBENCH_FORWARDED_ALLOW_IPS: '*' would let any client write its own "
                    "address (a fresh throttle key each time); name the proxies' addresses"
                )
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(
                    f"SZBENCH_FORWARDED_ALLOW_IPS: {entry!r} is not an IP address, a network "
                    "(10.0.0.0/24) or 'gateway'"
                ) from None
        return value

    @field_validator("submissions_per_day", "held_out_runs_per_day", mode="before")
    @classmethod
    def _empty_is_unlimited(cls, value: object) -> object:
        # An operator lifts a limit by leaving its variable empty (.env.example says so).
        return None if isinstance(value, str) and not value.strip() else value

    def image_is_allowed(self, *, digest: str | None = None, reference: str | None = None) -> bool:
        """Whether an algorithm image passes ``allowed_images`` (everything when it is empty).

        Prefixes compare against the reference as written ("registry/name:tag" or
        "registry/name@sha256:..."), digests exactly; a tarball upload has no reference,
        so only a listed digest admits it.
        """
        rules = [r.strip() for r in self.allowed_images.split(",") if r.strip()]
        if not rules:
            return True
        for rule in rules:
            if rule.startswith("sha256:"):
                if digest is not None and digest == rule:
                    return True
            elif reference is not None and reference.startswith(rule):
                return True
        return False

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'szbench.sqlite3'}"

    @property
    def effective_uploads_dir(self) -> Path:
        return self.uploads_dir or self.data_dir / "uploads"


@lru_cache
def get_settings() -> Settings:
    return Settings()


class ConfigError(Exception):
    """Settings that are each valid but cannot serve together; the message names them."""


PUBLIC_URL_REQUIRED = (
    "SZBENCH_PUBLIC_URL is not set, and e-mail is on (SZBENCH_SMTP_HOST): every link in a "
    "message (password reset, address verification) is built from it, never from the "
    "request's Host header. Set it to the site's address as users reach it, e.g. "
    "SZBENCH_PUBLIC_URL=https://bench.example.org"
)


def check_serving(settings: Settings | None = None) -> None:
    """Refuse to serve with settings that would be unsafe together (:class:`ConfigError`):
    run by the app factory and by ``szbench serve`` before anything else."""
    settings = settings or get_settings()
    if settings.smtp_host and not settings.public_url:
        raise ConfigError(PUBLIC_URL_REQUIRED)

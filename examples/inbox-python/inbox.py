"""The Hookstream inbox contract in Python: the same table, statements and rules as the Rust
crate `hookstream-inbox` (docs/receiving.md describes them).

- receive(): verify the Standard Webhooks signature with any of the route's secrets (the
  `standardwebhooks` package: +-5 minutes, constant-time comparison), refuse bodies over the
  limit (413) and bodies that are not JSON (400), and store the body once in
  hookstream_inbox.inbox with INSERT ... ON CONFLICT (source, message_id) DO NOTHING. A
  duplicate is answered 204 like a new message; nothing of the application runs here.
- Workers claim due pending rows (FOR UPDATE SKIP LOCKED, in batches) and run the
  application's handler under a savepoint of the claiming transaction, which also marks the
  row: the business change and "processed" commit together. The handler returns DONE,
  Defer(reason[, until]) or Fail(reason); deferrals are bounded by count and age, failures by
  count, and past a bound the row is quarantined with its reason.
- Metrics (InboxMetrics): the Rust crate's `hookstream_inbox_*` names and labels, in a
  prometheus_client registry the application exposes; the gauges (pending, deferred,
  quarantined, oldest pending age) refreshed from the table every stats_interval_ms by the
  maintenance thread, which also applies retention: processed rows older than retention_s
  deleted every prune_interval_ms, a bounded batch per statement.
"""

import dataclasses
import datetime as dt
import json
import logging
import os
import threading
import time
import typing as t

import psycopg
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from psycopg_pool import ConnectionPool
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

log = logging.getLogger("inbox")

INSERT_SQL = """
INSERT INTO hookstream_inbox.inbox
       (source, message_id, event_type, ordering_key, payload, webhook_timestamp)
VALUES (%s, %s, %s, %s, %s::json, %s)
ON CONFLICT (source, message_id) DO NOTHING
RETURNING id
"""

CLAIM_SQL = """
SELECT i.id, i.message_id, i.event_type, i.ordering_key, i.payload, i.received_at,
       i.pending_since, i.attempts, i.deferrals
  FROM hookstream_inbox.inbox i
 WHERE i.source = %s AND i.status = 'pending' AND i.next_attempt_at <= now()
   AND (i.ordering_key IS NULL OR NOT EXISTS (
         SELECT 1 FROM hookstream_inbox.inbox e
          WHERE e.source = i.source AND e.ordering_key = i.ordering_key
            AND e.status = 'pending' AND e.id < i.id))
 ORDER BY i.next_attempt_at
 LIMIT %s
 FOR UPDATE OF i SKIP LOCKED
"""

PROCESSED_SQL = """
UPDATE hookstream_inbox.inbox SET status = 'processed', processed_at = clock_timestamp()
 WHERE id = %s
"""

RETRY_SQL = """
UPDATE hookstream_inbox.inbox
   SET next_attempt_at = %s, last_reason = %s,
       deferrals = deferrals + %s, attempts = attempts + %s
 WHERE id = %s
"""

QUARANTINE_SQL = """
UPDATE hookstream_inbox.inbox
   SET status = 'quarantined', quarantined_at = clock_timestamp(), last_reason = %s,
       deferrals = deferrals + %s, attempts = attempts + %s
 WHERE id = %s
"""

REPLAY_SQL = """
UPDATE hookstream_inbox.inbox
   SET status = 'pending', next_attempt_at = now(), pending_since = now(),
       attempts = 0, deferrals = 0, quarantined_at = NULL, replays = replays + 1
 WHERE source = %s AND status = 'quarantined' AND (%s OR id = ANY(%s))
RETURNING id
"""

# The gauges' figures and retention: the statements of the Rust crate's store.rs (stats,
# prune), retention in seconds here.
STATS_SQL = """
SELECT count(*) AS pending,
       count(*) FILTER (WHERE deferrals > 0) AS deferred,
       coalesce(extract(epoch FROM now() - min(pending_since)), 0)::float8 AS oldest
  FROM hookstream_inbox.inbox WHERE source = %s AND status = 'pending'
"""

QUARANTINED_SQL = """
SELECT count(*) FROM hookstream_inbox.inbox WHERE source = %s AND status = 'quarantined'
"""

PRUNE_SQL = """
DELETE FROM hookstream_inbox.inbox
 WHERE id IN (SELECT id FROM hookstream_inbox.inbox
               WHERE status = 'processed' AND source = %s
                 AND processed_at < now() - %s * interval '1 second'
               LIMIT %s)
"""

# Rows one prune statement deletes at most (short transactions, whatever the backlog).
PRUNE_BATCH = 5000

# Longest webhook-id and ordering key stored: both are indexed, and PostgreSQL refuses index
# entries beyond about 2.7 kB.
MAX_KEY_BYTES = 256
# The Rust crate's limits on `webhook-signature` (hookstream_signing::MAX_SIGNATURE_HEADER_BYTES,
# MAX_SIGNATURE_ENTRIES): a longer header, or one with more `v1` entries, is refused before
# any HMAC. `standardwebhooks` MACs the body once per verify(), so the work per request is
# one pass over the body per secret, whatever the header carries.
MAX_SIGNATURE_HEADER_BYTES = 4096
MAX_SIGNATURE_ENTRIES = 16

HERE = os.path.dirname(os.path.abspath(__file__))
MIGRATIONS_DIR = os.path.join(HERE, "..", "..", "crates", "hookstream-inbox", "migrations")


class _Aborted(Exception):
    """A handler answered DONE with the transaction aborted by one of its statements."""


ABORTED_REASON = ("the handler answered DONE, but one of its statements had failed and aborted the "
                  "transaction (was a database error caught?)")


class _Done:
    def __repr__(self):
        return "DONE"


DONE = _Done()


@dataclasses.dataclass
class Defer:
    reason: str
    until: t.Optional[dt.datetime] = None


@dataclasses.dataclass
class Fail:
    reason: str


@dataclasses.dataclass
class Message:
    id: int
    source: str
    message_id: str
    event_type: t.Optional[str]
    ordering_key: t.Optional[str]
    payload: t.Any
    received_at: dt.datetime
    pending_since: dt.datetime
    attempts: int
    deferrals: int


@dataclasses.dataclass
class Settings:
    source: str = "hookstream"
    secrets: t.List[str] = dataclasses.field(default_factory=list)
    max_body_bytes: int = 1024 * 1024
    ordering_key: t.Optional[str] = None  # a JSON pointer such as "/order_id"
    workers: int = 2
    batch_size: int = 50  # at most 64: one subtransaction per row (docs/receiving.md)
    poll_ms: int = 250
    defer_backoff_ms: int = 1000
    max_defer_backoff_ms: int = 300_000
    max_deferrals: int = 20
    max_deferral_age_secs: int = 86400
    retry_backoff_ms: int = 1000
    max_retry_backoff_ms: int = 600_000
    max_attempts: int = 10
    retention_s: int = 7 * 24 * 3600  # processed rows kept this long: the dedup window (0: for ever)
    prune_interval_ms: int = 600_000
    stats_interval_ms: int = 5000

    @classmethod
    def from_env(cls) -> "Settings":
        s = cls()
        s.source = os.environ.get("INBOX_SOURCE", s.source)
        s.secrets = os.environ.get("INBOX_SECRETS", "").split()
        if not s.secrets:
            raise SystemExit("INBOX_SECRETS must list at least one whsec_ secret")
        s.ordering_key = os.environ.get("INBOX_ORDERING_KEY") or None
        for name in (
            "max_body_bytes", "workers", "batch_size", "poll_ms", "defer_backoff_ms",
            "max_defer_backoff_ms", "max_deferrals", "max_deferral_age_secs",
            "retry_backoff_ms", "max_retry_backoff_ms", "max_attempts", "retention_s",
            "prune_interval_ms", "stats_interval_ms",
        ):
            value = os.environ.get("INBOX_" + name.upper())
            if value is not None:
                try:
                    setattr(s, name, int(value))
                except ValueError:
                    raise SystemExit(f"INBOX_{name.upper()} must be an integer, not {value!r}")
        return s


def _doubling(base_ms: int, max_ms: int, n: int) -> dt.timedelta:
    return dt.timedelta(milliseconds=min(base_ms * (2 ** min(max(n - 1, 0), 40)), max_ms))


def _pointer(value: t.Any, pointer: str) -> t.Any:
    """RFC 6901: the value at `pointer`, or None."""
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict):
            value = value.get(token)
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return None
    return value


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def migrate(pool: ConnectionPool, migrations_dir: str = MIGRATIONS_DIR) -> None:
    """Applies every migration file of the Rust crate, in order, each in one transaction
    (every file is idempotent and takes an advisory lock)."""
    files = sorted(f for f in os.listdir(migrations_dir) if f.endswith(".sql"))
    with pool.connection() as conn:
        for name in files:
            with open(os.path.join(migrations_dir, name)) as f:
                sql = f.read()
            with conn.transaction():
                conn.execute(sql)


# Fine enough to quote an acknowledgement p99 against a 5 ms objective (the Rust buckets).
ACK_BUCKETS = (
    0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)
# 1 ms doubling, 22 buckets (the Rust `exponential_buckets(0.001, 2.0, 22)`).
LATENCY_BUCKETS = tuple(0.001 * 2**i for i in range(22))


class _Gauges:
    """The pending, deferred, quarantined and oldest-age gauges, per source, as the last refresh
    found them. A collector of its own because prometheus_client refuses a gauge named
    `hookstream_inbox_quarantined` beside the counter `hookstream_inbox_quarantined_total`
    (it reserves a counter's name without `_total`), and those are the Rust crate's names."""

    FAMILIES = (
        ("hookstream_inbox_pending", "Messages waiting to be processed", "pending"),
        ("hookstream_inbox_deferred", "Pending messages deferred at least once", "deferred"),
        ("hookstream_inbox_quarantined", "Messages in quarantine", "quarantined"),
        ("hookstream_inbox_oldest_pending_age_seconds",
         "Age of the oldest pending message (0 when none)", "oldest"),
    )

    def __init__(self):
        self.lock = threading.Lock()
        self.by_source: t.Dict[str, t.Dict[str, float]] = {}

    def set(self, source: str, **figures: float) -> None:
        with self.lock:
            self.by_source[source] = figures

    def collect(self):
        with self.lock:
            snapshot = dict(self.by_source)
        for name, doc, key in self.FAMILIES:
            family = GaugeMetricFamily(name, doc, labels=["source"])
            for source, figures in sorted(snapshot.items()):
                family.add_metric([source], figures[key])
            yield family


class InboxMetrics:
    """The Rust crate's metrics (crates/hookstream-inbox/src/metrics.rs): same names, same
    labels (`source`, and `reason` from the same small sets). Create once per registry and
    hand to every Inbox of the process."""

    def __init__(self, registry: CollectorRegistry):
        source, reason = ["source"], ["source", "reason"]

        def counter(name, doc, labels=source):
            return Counter(name, doc, labels, registry=registry)

        self.received = counter("hookstream_inbox_received_total", "New messages stored")
        self.duplicates = counter(
            "hookstream_inbox_duplicates_total",
            "Deliveries of an already stored message (answered 2xx, nothing stored)")
        self.verification_failures = counter(
            "hookstream_inbox_verification_failures_total",
            "Deliveries refused with 401 (header, timestamp, signature)", reason)
        self.rejected = counter(
            "hookstream_inbox_rejected_total",
            "Deliveries refused for their body or because nothing could be stored (too_large, unreadable, not_json, too_long, unavailable)",
            reason)
        self.ack_seconds = Histogram(
            "hookstream_inbox_ack_seconds",
            "Request arrival to the 2xx answer (stored or duplicate)", source,
            buckets=ACK_BUCKETS, registry=registry)
        self.processed = counter(
            "hookstream_inbox_processed_total",
            "Messages processed (handler done, committed with the processed mark)")
        self.processing_latency_seconds = Histogram(
            "hookstream_inbox_processing_latency_seconds",
            "Receipt of a message to the commit that processed it", source,
            buckets=LATENCY_BUCKETS, registry=registry)
        self.deferrals = counter(
            "hookstream_inbox_deferrals_total", "Deferrals committed (the handler said: not yet)")
        self.failures = counter(
            "hookstream_inbox_failures_total", "Handler failures committed (retried with backoff)")
        self.quarantined_total = counter(
            "hookstream_inbox_quarantined_total", "Messages quarantined (deferred, failed, invalid)",
            reason)
        self.replayed = counter(
            "hookstream_inbox_replayed_total", "Quarantined messages put back to pending")
        self.errors = counter(
            "hookstream_inbox_errors_total", "Worker and maintenance rounds that hit a database error")
        self.pruned = counter(
            "hookstream_inbox_pruned_total", "Processed messages deleted past the retention window")
        self.gauges = _Gauges()
        registry.register(self.gauges)


def _verification_reason(why: str) -> str:
    """The metric reason of a refused signature, as the Rust crate names it."""
    why = why.lower()
    if "timestamp too" in why:
        return "timestamp"
    if "signature found" in why or "signature matches" in why:
        return "signature"
    if "webhook-signature` header" in why and ("bytes" in why or "signatures" in why):
        return "oversized_signature"
    return "header"


def _oversized_signature(sig: str) -> t.Optional[str]:
    """Why `webhook-signature` is over the limits (the Rust crate's words), or None."""
    size = len(sig.encode())
    if size > MAX_SIGNATURE_HEADER_BYTES:
        return (f"`webhook-signature` header is {size} bytes, more than the "
                f"{MAX_SIGNATURE_HEADER_BYTES} accepted")
    if sum(1 for e in sig.split() if e.startswith("v1,")) > MAX_SIGNATURE_ENTRIES:
        return f"`webhook-signature` header has more than {MAX_SIGNATURE_ENTRIES} `v1` signatures"
    return None


class Inbox:
    def __init__(self, pool: ConnectionPool, settings: Settings, handler, metrics: InboxMetrics):
        self.pool = pool
        self.s = settings
        self.handler = handler
        self.m = metrics
        self.hooks = [Webhook(secret) for secret in settings.secrets]
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.threads: t.List[threading.Thread] = []

    # ---- receiving ----

    def verify(self, body: str, headers: t.Mapping[str, str]) -> t.Optional[str]:
        """None when one of the secrets verifies; else why not. An oversized
        `webhook-signature` is refused before any HMAC."""
        oversized = _oversized_signature(headers.get("webhook-signature", ""))
        if oversized is not None:
            return oversized
        why = "no signature matches"
        for hook in self.hooks:
            try:
                hook.verify(body, dict(headers), json_parse=False)
                return None
            except WebhookVerificationError as e:
                why = str(e)
                if "signature found" not in why:
                    return why  # headers or timestamp: the same for every secret
            except Exception as e:  # a malformed signature header
                return f"malformed webhook-signature: {e}"
        return why

    def receive(self, raw: bytes, headers: t.Mapping[str, str],
                started: t.Optional[float] = None) -> t.Tuple[int, str]:
        """The answer (status, text) to one delivery, counted in the metrics; `started` is
        the request's arrival (time.monotonic()), for the acknowledgement histogram."""
        started = time.monotonic() if started is None else started
        status, text, outcome = self._receive(raw, headers)
        source = self.s.source
        if outcome in ("received", "duplicates"):
            getattr(self.m, outcome).labels(source).inc()
            self.m.ack_seconds.labels(source).observe(time.monotonic() - started)
        elif status == 401:
            self.m.verification_failures.labels(source, outcome).inc()
        else:
            self.m.rejected.labels(source, outcome).inc()
        return status, text

    def too_large(self) -> t.Tuple[int, str]:
        """The 413 for a body the web framework refused to read (counted)."""
        self.m.rejected.labels(self.s.source, "too_large").inc()
        return 413, f"body larger than {self.s.max_body_bytes} bytes"

    def _receive(self, raw: bytes, headers: t.Mapping[str, str]) -> t.Tuple[int, str, str]:
        """(status, text, what to count: received, duplicates, or the metric reason)."""
        if len(raw) > self.s.max_body_bytes:
            return 413, f"body larger than {self.s.max_body_bytes} bytes", "too_large"
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:
            return 400, "body is not JSON: not UTF-8", "not_json"
        why = self.verify(body, headers)
        if why is not None:
            return 401, why, _verification_reason(why)
        if len(headers.get("webhook-id", "").encode()) > MAX_KEY_BYTES:
            return 400, f"webhook-id longer than {MAX_KEY_BYTES} bytes", "too_long"
        try:
            payload = json.loads(body, parse_constant=_reject_constant)
        except ValueError as e:
            return 400, f"body is not JSON: {e}", "not_json"
        event_type = headers.get("hookstream-event-type")
        if event_type is None and isinstance(payload, dict) and isinstance(payload.get("type"), str):
            event_type = payload["type"]
        key = None
        if self.s.ordering_key:
            v = _pointer(payload, self.s.ordering_key)
            key = None if v is None else (v if isinstance(v, str) else json.dumps(v))
            if key is not None and len(key.encode()) > MAX_KEY_BYTES:
                return 400, f"ordering key longer than {MAX_KEY_BYTES} bytes", "too_long"
        try:
            with self.pool.connection() as conn:
                row = conn.execute(
                    INSERT_SQL,
                    (self.s.source, headers.get("webhook-id"), event_type, key, body,
                     int(headers.get("webhook-timestamp"))),
                ).fetchone()
        except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as e:
            return 400, f"payload refused by the database: {e.diag.message_primary}", "not_json"
        except psycopg.Error as e:
            log.warning("inbox: cannot store, answering 503 source=%s error=%s", self.s.source, e)
            return 503, "inbox unavailable, retry later", "unavailable"
        if row is None:
            return 204, "", "duplicates"
        self.wake.set()
        return 204, "", "received"

    # ---- processing ----

    def start(self) -> None:
        """Starts the workers and the maintenance thread (gauges, retention)."""
        self.start_workers()
        th = threading.Thread(target=self._maintenance, name="inbox-maintenance", daemon=True)
        th.start()
        self.threads.append(th)

    def start_workers(self) -> None:
        for n in range(self.s.workers):
            th = threading.Thread(target=self._worker, args=(n,), name=f"inbox-worker-{n}", daemon=True)
            th.start()
            self.threads.append(th)

    def shutdown(self) -> None:
        self.stop.set()
        self.wake.set()
        for th in self.threads:
            th.join()

    def _worker(self, n: int) -> None:
        errors = 0
        while not self.stop.is_set():
            try:
                claimed = self._batch()
                errors = 0
            except psycopg.Error as e:
                errors += 1
                self.m.errors.labels(self.s.source).inc()
                wait = min(0.1 * 2 ** min(errors, 8), 10.0)
                log.warning("inbox worker: database error, batch rolled back worker=%d error=%s retry_in_s=%.1f", n, e, wait)
                self.stop.wait(wait)
                continue
            except Exception:
                # Not a database error: a bug here. Say so loudly and stop the receiver.
                log.exception("inbox worker %d stopped unexpectedly", n)
                os._exit(1)
            if claimed >= self.s.batch_size:
                continue
            if claimed == 0:
                self.wake.wait(self.s.poll_ms / 1000)
                self.wake.clear()

    def _batch(self) -> int:
        decided = []
        with self.pool.connection() as conn:
            with conn.transaction():
                rows = conn.execute(CLAIM_SQL, (self.s.source, self.s.batch_size)).fetchall()
                for (id_, message_id, event_type, key, payload, received_at, pending_since,
                     attempts, deferrals) in rows:
                    m = Message(id_, self.s.source, message_id, event_type, key, payload,
                                received_at, pending_since, attempts, deferrals)
                    outcome = self._run(conn, m)
                    decided.append((m, outcome, self._mark(conn, m, outcome)))
        # Committed: now log and count (each decision one place that does both).
        source = self.s.source
        now = dt.datetime.now(dt.timezone.utc)
        for m, outcome, mark in decided:
            if mark[0] == "processed":
                self.m.processed.labels(source).inc()
                self.m.processing_latency_seconds.labels(source).observe(
                    max((now - m.received_at).total_seconds(), 0.0))
            elif mark[0] == "retry" and isinstance(outcome, Defer):
                self.m.deferrals.labels(source).inc()
                log.info("inbox: message deferred source=%s message_id=%s reason=%r next_attempt_at=%s",
                         source, m.message_id, outcome.reason, mark[1].isoformat())
            elif mark[0] == "retry":
                self.m.failures.labels(source).inc()
                log.warning("inbox: message failed, will retry source=%s message_id=%s reason=%r",
                            source, m.message_id, outcome.reason)
            elif mark[0] == "quarantine":
                cause = "deferred" if isinstance(outcome, Defer) else "failed"
                (self.m.deferrals if cause == "deferred" else self.m.failures).labels(source).inc()
                self.m.quarantined_total.labels(source, cause).inc()
                log.warning("inbox: message quarantined source=%s message_id=%s cause=%s reason=%r",
                            source, m.message_id, cause, mark[1])
        return len(decided)

    # ---- maintenance ----

    def refresh_gauges(self) -> None:
        """Sets the pending, deferred, quarantined and oldest-age gauges from the table."""
        with self.pool.connection() as conn:
            pending, deferred, oldest = conn.execute(STATS_SQL, (self.s.source,)).fetchone()
            (quarantined,) = conn.execute(QUARANTINED_SQL, (self.s.source,)).fetchone()
        self.m.gauges.set(self.s.source, pending=pending, deferred=deferred,
                          quarantined=quarantined, oldest=max(oldest, 0.0))

    def prune_once(self) -> int:
        """Deletes the processed rows of this source older than retention_s, PRUNE_BATCH rows
        per statement (each its own short transaction); returns how many."""
        if self.s.retention_s <= 0:
            return 0
        total = 0
        while not self.stop.is_set():
            with self.pool.connection() as conn:
                n = conn.execute(PRUNE_SQL, (self.s.source, self.s.retention_s, PRUNE_BATCH)).rowcount
            self.m.pruned.labels(self.s.source).inc(n)
            total += n
            if n < PRUNE_BATCH:
                break
        if total > 0:
            log.info("inbox: pruned processed messages source=%s rows=%d retention_s=%d",
                     self.s.source, total, self.s.retention_s)
        return total

    def _maintenance(self) -> None:
        """The gauges every stats_interval_ms and retention every prune_interval_ms, both at
        once at start; a database error is logged, counted and tried again next time."""
        jobs = [
            [self.refresh_gauges, self.s.stats_interval_ms / 1000, 0.0, "refresh the gauges"],
            [self.prune_once, self.s.prune_interval_ms / 1000, 0.0, "prune processed messages"],
        ]
        while not self.stop.is_set():
            for job in jobs:
                run, every, due, what = job
                if time.monotonic() < due:
                    continue
                try:
                    run()
                except psycopg.Error as e:
                    self.m.errors.labels(self.s.source).inc()
                    log.warning("inbox: cannot %s source=%s error=%s", what, self.s.source, e)
                except Exception:
                    # Not a database error: a bug here. Say so loudly and stop the receiver.
                    log.exception("inbox maintenance stopped unexpectedly")
                    os._exit(1)
                job[2] = time.monotonic() + every
            self.stop.wait(max(min(job[2] for job in jobs) - time.monotonic(), 0.0))

    def _run(self, conn, m: Message):
        outcome = DONE
        try:
            with conn.transaction():  # a savepoint
                outcome = self.handler(conn, m)
                if outcome is DONE and conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    # DONE over a failed statement (a database error caught): nothing more runs
                    # on the transaction, so this row is rolled back and failed, alone.
                    raise _Aborted()
                if outcome is not DONE:
                    raise psycopg.Rollback()
        except _Aborted:
            outcome = Fail(ABORTED_REASON)
        except Exception as e:
            outcome = Fail(f"handler error: {e}")
        if not isinstance(outcome, (_Done, Defer, Fail)):
            outcome = Fail(f"handler returned {outcome!r}")
        return outcome

    def _mark(self, conn, m: Message, outcome):
        now = dt.datetime.now(dt.timezone.utc)
        if outcome is DONE:
            conn.execute(PROCESSED_SQL, (m.id,))
            return ("processed",)
        if isinstance(outcome, Defer):
            count = m.deferrals + 1
            age = (now - m.pending_since).total_seconds()
            reason = None
            if count > self.s.max_deferrals:
                reason = f"deferred {count - 1} times (max_deferrals {self.s.max_deferrals}): {outcome.reason}"
            elif age >= self.s.max_deferral_age_secs:
                reason = f"deferred for {int(age)} s (max_deferral_age_secs {self.s.max_deferral_age_secs}): {outcome.reason}"
            if reason is not None:
                conn.execute(QUARANTINE_SQL, (reason, 1, 0, m.id))
                return ("quarantine", reason)
            at = outcome.until or now + _doubling(self.s.defer_backoff_ms, self.s.max_defer_backoff_ms, count)
            conn.execute(RETRY_SQL, (at, outcome.reason, 1, 0, m.id))
            return ("retry", at)
        count = m.attempts + 1
        if count >= self.s.max_attempts:
            reason = f"failed {count} times (max_attempts {self.s.max_attempts}): {outcome.reason}"
            conn.execute(QUARANTINE_SQL, (reason, 0, 1, m.id))
            return ("quarantine", reason)
        at = now + _doubling(self.s.retry_backoff_ms, self.s.max_retry_backoff_ms, count)
        conn.execute(RETRY_SQL, (at, outcome.reason, 0, 1, m.id))
        return ("retry", at)

    # ---- quarantine ----

    def list_quarantined(self, limit: int = 100):
        with self.pool.connection() as conn:
            return conn.execute(
                "SELECT id, message_id, event_type, last_reason, quarantined_at FROM hookstream_inbox.inbox"
                " WHERE source = %s AND status = 'quarantined' ORDER BY quarantined_at, id LIMIT %s",
                (self.s.source, limit),
            ).fetchall()

    def replay(self, ids: t.Optional[t.List[int]] = None) -> t.List[int]:
        """Puts quarantined rows (these ids, or all of the source) back to pending."""
        with self.pool.connection() as conn:
            rows = conn.execute(REPLAY_SQL, (self.s.source, ids is None, ids or [])).fetchall()
        self.m.replayed.labels(self.s.source).inc(len(rows))
        self.wake.set()
        return [r[0] for r in rows]

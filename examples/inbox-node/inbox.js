// The Hookstream inbox contract in Node.js: the same table, statements and rules as the Rust
// crate `hookstream-inbox` (docs/receiving.md describes them).
//
// - receive(): verify the Standard Webhooks signature with any of the route's secrets (the
//   `standardwebhooks` package: +-5 minutes, constant-time comparison), refuse bodies that are
//   not JSON (400; bodies over the limit get 413 from express.raw), and store the body once
//   in hookstream_inbox.inbox with INSERT ... ON CONFLICT (source, message_id) DO NOTHING. A
//   duplicate is answered 204 like a new message; nothing of the application runs here.
// - Workers claim due pending rows (FOR UPDATE SKIP LOCKED, in batches) and run the
//   application's handler under a savepoint of the claiming transaction, which also marks
//   the row: the business change and "processed" commit together. The handler returns DONE,
//   defer(reason[, until]) or fail(reason); deferrals are bounded by count and age, failures
//   by count, and past a bound the row is quarantined with its reason.
// - Metrics (InboxMetrics): the Rust crate's `hookstream_inbox_*` names and labels, in a
//   prom-client registry the application exposes; the gauges (pending, deferred, quarantined,
//   oldest pending age) refreshed from the table every statsIntervalMs by the maintenance
//   loop, which also applies retention: processed rows older than retentionS deleted every
//   pruneIntervalMs, a bounded batch per statement.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const client = require("prom-client");
const { Webhook, WebhookVerificationError } = require("standardwebhooks");

const INSERT_SQL = `
INSERT INTO hookstream_inbox.inbox
       (source, message_id, event_type, ordering_key, payload, webhook_timestamp)
VALUES ($1, $2, $3, $4, $5::json, $6)
ON CONFLICT (source, message_id) DO NOTHING
RETURNING id`;

const CLAIM_SQL = `
SELECT i.id, i.message_id, i.event_type, i.ordering_key, i.payload, i.received_at,
       i.pending_since, i.attempts, i.deferrals
  FROM hookstream_inbox.inbox i
 WHERE i.source = $1 AND i.status = 'pending' AND i.next_attempt_at <= now()
   AND (i.ordering_key IS NULL OR NOT EXISTS (
         SELECT 1 FROM hookstream_inbox.inbox e
          WHERE e.source = i.source AND e.ordering_key = i.ordering_key
            AND e.status = 'pending' AND e.id < i.id))
 ORDER BY i.next_attempt_at
 LIMIT $2
 FOR UPDATE OF i SKIP LOCKED`;

const PROCESSED_SQL = `
UPDATE hookstream_inbox.inbox SET status = 'processed', processed_at = clock_timestamp()
 WHERE id = $1`;

const RETRY_SQL = `
UPDATE hookstream_inbox.inbox
   SET next_attempt_at = $1, last_reason = $2,
       deferrals = deferrals + $3, attempts = attempts + $4
 WHERE id = $5`;

const QUARANTINE_SQL = `
UPDATE hookstream_inbox.inbox
   SET status = 'quarantined', quarantined_at = clock_timestamp(), last_reason = $1,
       deferrals = deferrals + $2, attempts = attempts + $3
 WHERE id = $4`;

const REPLAY_SQL = `
UPDATE hookstream_inbox.inbox
   SET status = 'pending', next_attempt_at = now(), pending_since = now(),
       attempts = 0, deferrals = 0, quarantined_at = NULL, replays = replays + 1
 WHERE source = $1 AND status = 'quarantined' AND ($2 OR id = ANY($3::int8[]))
RETURNING id`;

// The gauges' figures and retention: the statements of the Rust crate's store.rs (stats,
// prune), retention in seconds here.
const STATS_SQL = `
SELECT count(*) AS pending,
       count(*) FILTER (WHERE deferrals > 0) AS deferred,
       coalesce(extract(epoch FROM now() - min(pending_since)), 0)::float8 AS oldest
  FROM hookstream_inbox.inbox WHERE source = $1 AND status = 'pending'`;

const QUARANTINED_SQL = `
SELECT count(*) FROM hookstream_inbox.inbox WHERE source = $1 AND status = 'quarantined'`;

const PRUNE_SQL = `
DELETE FROM hookstream_inbox.inbox
 WHERE id IN (SELECT id FROM hookstream_inbox.inbox
               WHERE status = 'processed' AND source = $1
                 AND processed_at < now() - $2 * interval '1 second'
               LIMIT $3)`;

// Rows one prune statement deletes at most (short transactions, whatever the backlog).
const PRUNE_BATCH = 5000;

// Longest webhook-id and ordering key stored: both are indexed, and PostgreSQL refuses index
// entries beyond about 2.7 kB.
const MAX_KEY_BYTES = 256;
// The Rust crate's limits on `webhook-signature` (hookstream_signing::MAX_SIGNATURE_HEADER_BYTES,
// MAX_SIGNATURE_ENTRIES): a longer header, or one with more `v1` entries, is refused before
// any HMAC. `standardwebhooks` MACs the body once per verify(), so the work per request is
// one pass over the body per secret, whatever the header carries.
const MAX_SIGNATURE_HEADER_BYTES = 4096;
const MAX_SIGNATURE_ENTRIES = 16;

const MIGRATIONS_DIR = path.join(__dirname, "..", "..", "crates", "hookstream-inbox", "migrations");

const DONE = Object.freeze({ kind: "done" });
const defer = (reason, until = null) => ({ kind: "defer", reason, until });
const fail = (reason) => ({ kind: "fail", reason });
const ABORTED_REASON =
  "the handler answered DONE, but one of its statements had failed and aborted the transaction " +
  "(was a database error caught?)";

function log(level, msg, fields = {}) {
  const parts = Object.entries(fields).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  console.log(`${new Date().toISOString()} ${level} inbox ${msg} ${parts.join(" ")}`);
}

function settingsFromEnv(env = process.env) {
  const s = {
    source: env.INBOX_SOURCE || "hookstream",
    secrets: (env.INBOX_SECRETS || "").split(/\s+/).filter(Boolean),
    orderingKey: env.INBOX_ORDERING_KEY || null,
    maxBodyBytes: 1024 * 1024,
    workers: 2,
    batchSize: 50, // at most 64: one subtransaction per row (docs/receiving.md)
    pollMs: 250,
    deferBackoffMs: 1000,
    maxDeferBackoffMs: 300000,
    maxDeferrals: 20,
    maxDeferralAgeSecs: 86400,
    retryBackoffMs: 1000,
    maxRetryBackoffMs: 600000,
    maxAttempts: 10,
    retentionS: 7 * 24 * 3600, // processed rows kept this long: the dedup window (0: for ever)
    pruneIntervalMs: 600000,
    statsIntervalMs: 5000,
  };
  if (s.secrets.length === 0) throw new Error("INBOX_SECRETS must list at least one whsec_ secret");
  for (const key of Object.keys(s)) {
    if (typeof s[key] !== "number") continue;
    const name = `INBOX_${key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
    if (env[name] !== undefined) {
      const v = Number.parseInt(env[name], 10);
      if (!Number.isFinite(v)) throw new Error(`${name} must be an integer, not ${env[name]}`);
      s[key] = v;
    }
  }
  return s;
}

const doubling = (baseMs, maxMs, n) => Math.min(baseMs * 2 ** Math.min(Math.max(n - 1, 0), 40), maxMs);

// RFC 6901: the value at `pointer`, or undefined.
function pointer(value, ptr) {
  for (const raw of ptr.split("/").slice(1)) {
    const token = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (value !== null && typeof value === "object" && Object.hasOwn(value, token)) value = value[token];
    else return undefined;
  }
  return value;
}

// Applies every migration file of the Rust crate, in order, each in one transaction (every
// file is idempotent and takes an advisory lock).
async function migrate(pool, dir = MIGRATIONS_DIR) {
  const files = fs.readdirSync(dir).filter((f) => f.endsWith(".sql")).sort();
  const client = await pool.connect();
  try {
    for (const f of files) {
      const sql = fs.readFileSync(path.join(dir, f), "utf8");
      await client.query("BEGIN");
      try {
        await client.query(sql);
        await client.query("COMMIT");
      } catch (e) {
        await client.query("ROLLBACK");
        throw e;
      }
    }
  } finally {
    client.release();
  }
}

// Fine enough to quote an acknowledgement p99 against a 5 ms objective (the Rust buckets).
const ACK_BUCKETS = [
  0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0,
  2.5, 5.0,
];
// 1 ms doubling, 22 buckets (the Rust `exponential_buckets(0.001, 2.0, 22)`).
const LATENCY_BUCKETS = client.exponentialBuckets(0.001, 2, 22);

// The Rust crate's metrics (crates/hookstream-inbox/src/metrics.rs): same names, same labels
// (`source`, and `reason` from the same small sets). Create once per registry and hand to
// every Inbox of the process.
class InboxMetrics {
  constructor(registry) {
    const registers = [registry];
    const source = ["source"];
    const reason = ["source", "reason"];
    const counter = (name, help, labelNames = source) => new client.Counter({ name, help, labelNames, registers });
    const gauge = (name, help) => new client.Gauge({ name, help, labelNames: source, registers });
    this.received = counter("hookstream_inbox_received_total", "New messages stored");
    this.duplicates = counter(
      "hookstream_inbox_duplicates_total",
      "Deliveries of an already stored message (answered 2xx, nothing stored)",
    );
    this.verificationFailures = counter(
      "hookstream_inbox_verification_failures_total",
      "Deliveries refused with 401 (header, timestamp, signature)",
      reason,
    );
    this.rejected = counter(
      "hookstream_inbox_rejected_total",
      "Deliveries refused for their body or because nothing could be stored (too_large, unreadable, not_json, too_long, unavailable)",
      reason,
    );
    this.ackSeconds = new client.Histogram({
      name: "hookstream_inbox_ack_seconds",
      help: "Request arrival to the 2xx answer (stored or duplicate)",
      labelNames: source,
      buckets: ACK_BUCKETS,
      registers,
    });
    this.processed = counter(
      "hookstream_inbox_processed_total",
      "Messages processed (handler done, committed with the processed mark)",
    );
    this.processingLatencySeconds = new client.Histogram({
      name: "hookstream_inbox_processing_latency_seconds",
      help: "Receipt of a message to the commit that processed it",
      labelNames: source,
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.deferrals = counter("hookstream_inbox_deferrals_total", "Deferrals committed (the handler said: not yet)");
    this.failures = counter("hookstream_inbox_failures_total", "Handler failures committed (retried with backoff)");
    this.quarantinedTotal = counter(
      "hookstream_inbox_quarantined_total",
      "Messages quarantined (deferred, failed, invalid)",
      reason,
    );
    this.replayed = counter("hookstream_inbox_replayed_total", "Quarantined messages put back to pending");
    this.errors = counter("hookstream_inbox_errors_total", "Worker and maintenance rounds that hit a database error");
    this.pruned = counter("hookstream_inbox_pruned_total", "Processed messages deleted past the retention window");
    this.pending = gauge("hookstream_inbox_pending", "Messages waiting to be processed");
    this.deferred = gauge("hookstream_inbox_deferred", "Pending messages deferred at least once");
    this.quarantined = gauge("hookstream_inbox_quarantined", "Messages in quarantine");
    this.oldestPendingAgeSeconds = gauge(
      "hookstream_inbox_oldest_pending_age_seconds",
      "Age of the oldest pending message (0 when none)",
    );
  }
}

// The metric reason of a refused signature, as the Rust crate names it.
function verificationReason(why) {
  const w = why.toLowerCase();
  if (w.includes("timestamp too")) return "timestamp";
  if (w.includes("signature found") || w.includes("signature matches")) return "signature";
  if (w.includes("webhook-signature` header") && (w.includes("bytes") || w.includes("signatures"))) {
    return "oversized_signature";
  }
  return "header";
}

// Why `webhook-signature` is over the limits (the Rust crate's words), or null.
function oversizedSignature(sig) {
  const size = Buffer.byteLength(sig);
  if (size > MAX_SIGNATURE_HEADER_BYTES) {
    return `\`webhook-signature\` header is ${size} bytes, more than the ${MAX_SIGNATURE_HEADER_BYTES} accepted`;
  }
  const v1 = sig.split(/\s+/).filter((e) => e.startsWith("v1,")).length;
  if (v1 > MAX_SIGNATURE_ENTRIES) {
    return `\`webhook-signature\` header has more than ${MAX_SIGNATURE_ENTRIES} \`v1\` signatures`;
  }
  return null;
}

class Inbox {
  constructor(pool, settings, handler, metrics) {
    this.pool = pool;
    this.s = settings;
    this.handler = handler;
    this.m = metrics;
    this.hooks = settings.secrets.map((secret) => new Webhook(secret));
    this.stopping = false;
    this.workers = [];
    this.wakers = new Set();
  }

  // null when one of the secrets verifies; else why not. An oversized `webhook-signature` is
  // refused before any HMAC.
  verify(body, headers) {
    const oversized = oversizedSignature(String(headers["webhook-signature"] ?? ""));
    if (oversized !== null) return oversized;
    let why = "no signature matches";
    for (const hook of this.hooks) {
      try {
        hook.verify(body, headers, { jsonParse: false });
        return null;
      } catch (e) {
        if (!(e instanceof WebhookVerificationError)) return `malformed webhook-signature: ${e.message}`;
        why = e.message;
        if (!why.includes("signature found")) return why; // headers or timestamp: same for all
      }
    }
    return why;
  }

  // The answer [status, text] to one delivery, counted in the metrics; `raw` is the body as
  // a Buffer, `started` the request's arrival (process.hrtime.bigint()), for the
  // acknowledgement histogram.
  async receive(raw, headers, started = process.hrtime.bigint()) {
    const [status, text, outcome] = await this.store(raw, headers);
    const source = this.s.source;
    if (outcome === "received" || outcome === "duplicates") {
      this.m[outcome].inc({ source });
      this.m.ackSeconds.observe({ source }, Number(process.hrtime.bigint() - started) / 1e9);
    } else if (status === 401) {
      this.m.verificationFailures.inc({ source, reason: outcome });
    } else {
      this.m.rejected.inc({ source, reason: outcome });
    }
    return [status, text];
  }

  // The 413 for a body the web framework refused to read (counted).
  tooLarge() {
    this.m.rejected.inc({ source: this.s.source, reason: "too_large" });
    return [413, `body larger than ${this.s.maxBodyBytes} bytes`];
  }

  // [status, text, what to count: received, duplicates, or the metric reason].
  async store(raw, headers) {
    const body = raw.toString("utf8");
    const why = this.verify(body, headers);
    if (why !== null) return [401, why, verificationReason(why)];
    if (!Buffer.from(body, "utf8").equals(raw)) return [400, "body is not JSON: not UTF-8", "not_json"];
    if (Buffer.byteLength(headers["webhook-id"] || "") > MAX_KEY_BYTES) {
      return [400, `webhook-id longer than ${MAX_KEY_BYTES} bytes`, "too_long"];
    }
    let payload;
    try {
      payload = JSON.parse(body);
    } catch (e) {
      return [400, `body is not JSON: ${e.message}`, "not_json"];
    }
    let eventType = headers["hookstream-event-type"] ?? null;
    if (eventType === null && payload && typeof payload === "object" && typeof payload.type === "string") {
      eventType = payload.type;
    }
    let key = null;
    if (this.s.orderingKey) {
      const v = pointer(payload, this.s.orderingKey);
      key = v === undefined || v === null ? null : typeof v === "string" ? v : JSON.stringify(v);
      if (key !== null && Buffer.byteLength(key) > MAX_KEY_BYTES) {
        return [400, `ordering key longer than ${MAX_KEY_BYTES} bytes`, "too_long"];
      }
    }
    try {
      const r = await this.pool.query(INSERT_SQL, [
        this.s.source,
        headers["webhook-id"],
        eventType,
        key,
        body,
        Number.parseInt(headers["webhook-timestamp"], 10),
      ]);
      if (r.rowCount === 0) return [204, "", "duplicates"];
      this.wake();
      return [204, "", "received"];
    } catch (e) {
      // 22xxx data exception, 23xxx integrity: the value, not the database.
      if (typeof e.code === "string" && (e.code.startsWith("22") || e.code.startsWith("23"))) {
        return [400, `payload refused by the database: ${e.message}`, "not_json"];
      }
      log("WARN", "inbox: cannot store, answering 503", { source: this.s.source, error: e.message });
      return [503, "inbox unavailable, retry later", "unavailable"];
    }
  }

  wake() {
    for (const w of this.wakers) w();
    this.wakers.clear();
  }

  sleep(ms) {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wakers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wakers.add(done);
    });
  }

  // Starts the workers and the maintenance loop (gauges, retention).
  start() {
    this.startWorkers();
    this.workers.push(this.maintenance());
  }

  startWorkers() {
    for (let n = 0; n < this.s.workers; n++) this.workers.push(this.worker(n));
  }

  async shutdown() {
    this.stopping = true;
    this.wake();
    await Promise.all(this.workers);
  }

  async worker(n) {
    let errors = 0;
    while (!this.stopping) {
      let claimed;
      try {
        claimed = await this.batch();
        errors = 0;
      } catch (e) {
        if (!e || typeof e.code !== "string") {
          // Not a database error: a bug here. Say so loudly and stop the receiver.
          log("ERROR", "inbox worker stopped unexpectedly", { worker: n, error: String(e && e.stack) });
          process.exit(1);
        }
        errors++;
        this.m.errors.inc({ source: this.s.source });
        const wait = Math.min(100 * 2 ** Math.min(errors, 8), 10000);
        log("WARN", "inbox worker: database error, batch rolled back", { worker: n, error: e.message, retry_in_ms: wait });
        await this.sleep(wait);
        continue;
      }
      if (claimed >= this.s.batchSize) continue;
      if (claimed === 0) await this.sleep(this.s.pollMs);
    }
  }

  async batch() {
    const client = await this.pool.connect();
    const decided = [];
    try {
      await client.query("BEGIN");
      try {
        const { rows } = await client.query(CLAIM_SQL, [this.s.source, this.s.batchSize]);
        for (const row of rows) {
          const m = {
            id: row.id,
            source: this.s.source,
            messageId: row.message_id,
            eventType: row.event_type,
            orderingKey: row.ordering_key,
            payload: row.payload,
            receivedAt: row.received_at,
            pendingSince: row.pending_since,
            attempts: row.attempts,
            deferrals: row.deferrals,
          };
          const outcome = await this.run(client, m);
          decided.push([m, outcome, await this.mark(client, m, outcome)]);
        }
        await client.query("COMMIT");
      } catch (e) {
        await client.query("ROLLBACK").catch(() => {});
        throw e;
      }
    } finally {
      client.release();
    }
    // Committed: now log and count (each decision one place that does both).
    const source = this.s.source;
    const now = Date.now();
    for (const [m, outcome, mark] of decided) {
      const fields = { source, message_id: m.messageId };
      if (mark[0] === "processed") {
        this.m.processed.inc({ source });
        this.m.processingLatencySeconds.observe({ source }, Math.max(now - m.receivedAt.getTime(), 0) / 1000);
      } else if (mark[0] === "retry" && outcome.kind === "defer") {
        this.m.deferrals.inc({ source });
        log("INFO", "inbox: message deferred", { ...fields, reason: outcome.reason, next_attempt_at: mark[1].toISOString() });
      } else if (mark[0] === "retry") {
        this.m.failures.inc({ source });
        log("WARN", "inbox: message failed, will retry", { ...fields, reason: outcome.reason });
      } else if (mark[0] === "quarantine") {
        const cause = outcome.kind === "defer" ? "deferred" : "failed";
        (cause === "deferred" ? this.m.deferrals : this.m.failures).inc({ source });
        this.m.quarantinedTotal.inc({ source, reason: cause });
        log("WARN", "inbox: message quarantined", { ...fields, cause, reason: mark[1] });
      }
    }
    return decided.length;
  }

  // Sets the pending, deferred, quarantined and oldest-age gauges from the table.
  async refreshGauges() {
    const source = this.s.source;
    const { rows } = await this.pool.query(STATS_SQL, [source]);
    const q = await this.pool.query(QUARANTINED_SQL, [source]);
    // count(*) is a bigint, which pg returns as a string.
    this.m.pending.set({ source }, Number(rows[0].pending));
    this.m.deferred.set({ source }, Number(rows[0].deferred));
    this.m.quarantined.set({ source }, Number(q.rows[0].count));
    this.m.oldestPendingAgeSeconds.set({ source }, Math.max(Number(rows[0].oldest), 0));
  }

  // Deletes the processed rows of this source older than retentionS, PRUNE_BATCH rows per
  // statement (each its own short transaction); returns how many.
  async pruneOnce() {
    if (this.s.retentionS <= 0) return 0;
    let total = 0;
    while (!this.stopping) {
      const { rowCount } = await this.pool.query(PRUNE_SQL, [this.s.source, this.s.retentionS, PRUNE_BATCH]);
      this.m.pruned.inc({ source: this.s.source }, rowCount);
      total += rowCount;
      if (rowCount < PRUNE_BATCH) break;
    }
    if (total > 0) {
      log("INFO", "inbox: pruned processed messages", { source: this.s.source, rows: total, retention_s: this.s.retentionS });
    }
    return total;
  }

  // The gauges every statsIntervalMs and retention every pruneIntervalMs, both at once at
  // start; a database error is logged, counted and tried again next time.
  async maintenance() {
    const jobs = [
      { run: () => this.refreshGauges(), every: this.s.statsIntervalMs, due: 0, what: "refresh the gauges" },
      { run: () => this.pruneOnce(), every: this.s.pruneIntervalMs, due: 0, what: "prune processed messages" },
    ];
    while (!this.stopping) {
      for (const job of jobs) {
        if (Date.now() < job.due) continue;
        try {
          await job.run();
        } catch (e) {
          if (!e || typeof e.code !== "string") {
            // Not a database error: a bug here. Say so loudly and stop the receiver.
            log("ERROR", "inbox maintenance stopped unexpectedly", { error: String(e && e.stack) });
            process.exit(1);
          }
          this.m.errors.inc({ source: this.s.source });
          log("WARN", `inbox: cannot ${job.what}`, { source: this.s.source, error: e.message });
        }
        job.due = Date.now() + job.every;
      }
      await this.sleep(Math.max(Math.min(...jobs.map((j) => j.due)) - Date.now(), 0));
    }
  }

  // Runs the handler under a savepoint: kept when DONE, rolled back otherwise.
  async run(client, m) {
    await client.query("SAVEPOINT inbox_row");
    let outcome;
    try {
      outcome = await this.handler(client, m);
      if (!outcome || !["done", "defer", "fail"].includes(outcome.kind)) {
        outcome = fail(`handler returned ${JSON.stringify(outcome)}`);
      }
    } catch (e) {
      outcome = fail(`handler error: ${e.message}`);
    }
    if (outcome.kind === "done") {
      try {
        await client.query("RELEASE SAVEPOINT inbox_row");
        return outcome;
      } catch (e) {
        // DONE over a failed statement (a database error caught): the transaction is aborted
        // (25P02), so this row is rolled back and failed, alone.
        if (e.code !== "25P02") throw e;
        outcome = fail(ABORTED_REASON);
      }
    }
    await client.query("ROLLBACK TO SAVEPOINT inbox_row");
    return outcome;
  }

  async mark(client, m, outcome) {
    const now = new Date();
    if (outcome.kind === "done") {
      await client.query(PROCESSED_SQL, [m.id]);
      return ["processed"];
    }
    if (outcome.kind === "defer") {
      const count = m.deferrals + 1;
      const age = (now - m.pendingSince) / 1000;
      let reason = null;
      if (count > this.s.maxDeferrals) {
        reason = `deferred ${count - 1} times (max_deferrals ${this.s.maxDeferrals}): ${outcome.reason}`;
      } else if (age >= this.s.maxDeferralAgeSecs) {
        reason = `deferred for ${Math.floor(age)} s (max_deferral_age_secs ${this.s.maxDeferralAgeSecs}): ${outcome.reason}`;
      }
      if (reason !== null) {
        await client.query(QUARANTINE_SQL, [reason, 1, 0, m.id]);
        return ["quarantine", reason];
      }
      const at = outcome.until || new Date(now.getTime() + doubling(this.s.deferBackoffMs, this.s.maxDeferBackoffMs, count));
      await client.query(RETRY_SQL, [at, outcome.reason, 1, 0, m.id]);
      return ["retry", at];
    }
    const count = m.attempts + 1;
    if (count >= this.s.maxAttempts) {
      const reason = `failed ${count} times (max_attempts ${this.s.maxAttempts}): ${outcome.reason}`;
      await client.query(QUARANTINE_SQL, [reason, 0, 1, m.id]);
      return ["quarantine", reason];
    }
    const at = new Date(now.getTime() + doubling(this.s.retryBackoffMs, this.s.maxRetryBackoffMs, count));
    await client.query(RETRY_SQL, [at, outcome.reason, 0, 1, m.id]);
    return ["retry", at];
  }

  async listQuarantined(limit = 100) {
    const { rows } = await this.pool.query(
      `SELECT id, message_id, event_type, last_reason, quarantined_at FROM hookstream_inbox.inbox
        WHERE source = $1 AND status = 'quarantined' ORDER BY quarantined_at, id LIMIT $2`,
      [this.s.source, limit],
    );
    return rows;
  }

  // Puts quarantined rows (these ids, or all of the source) back to pending.
  async replay(ids = null) {
    const { rows } = await this.pool.query(REPLAY_SQL, [this.s.source, ids === null, ids || []]);
    this.m.replayed.inc({ source: this.s.source }, rows.length);
    this.wake();
    return rows.map((r) => r.id);
  }
}

module.exports = { Inbox, InboxMetrics, DONE, defer, fail, migrate, settingsFromEnv, log };

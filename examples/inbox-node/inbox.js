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
"use strict";

const fs = require("node:fs");
const path = require("node:path");
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

// Longest webhook-id and ordering key stored: both are indexed, and PostgreSQL refuses index
// entries beyond about 2.7 kB.
const MAX_KEY_BYTES = 256;

const MIGRATIONS_DIR = path.join(__dirname, "..", "..", "crates", "hookstream-inbox", "migrations");

const DONE = Object.freeze({ kind: "done" });
const defer = (reason, until = null) => ({ kind: "defer", reason, until });
const fail = (reason) => ({ kind: "fail", reason });

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

class Inbox {
  constructor(pool, settings, handler) {
    this.pool = pool;
    this.s = settings;
    this.handler = handler;
    this.hooks = settings.secrets.map((secret) => new Webhook(secret));
    this.stopping = false;
    this.workers = [];
    this.wakers = new Set();
  }

  // null when one of the secrets verifies; else why not.
  verify(body, headers) {
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

  // The answer [status, text] to one delivery; `raw` is the body as a Buffer.
  async receive(raw, headers) {
    const body = raw.toString("utf8");
    const why = this.verify(body, headers);
    if (why !== null) return [401, why];
    if (!Buffer.from(body, "utf8").equals(raw)) return [400, "body is not JSON: not UTF-8"];
    if (Buffer.byteLength(headers["webhook-id"] || "") > MAX_KEY_BYTES) {
      return [400, `webhook-id longer than ${MAX_KEY_BYTES} bytes`];
    }
    let payload;
    try {
      payload = JSON.parse(body);
    } catch (e) {
      return [400, `body is not JSON: ${e.message}`];
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
        return [400, `ordering key longer than ${MAX_KEY_BYTES} bytes`];
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
      if (r.rowCount > 0) this.wake();
      return [204, ""];
    } catch (e) {
      // 22xxx data exception, 23xxx integrity: the value, not the database.
      if (typeof e.code === "string" && (e.code.startsWith("22") || e.code.startsWith("23"))) {
        return [400, `payload refused by the database: ${e.message}`];
      }
      log("WARN", "inbox: cannot store, answering 503", { source: this.s.source, error: e.message });
      return [503, "inbox unavailable, retry later"];
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
    // Committed: now log.
    for (const [m, outcome, mark] of decided) {
      const fields = { source: this.s.source, message_id: m.messageId };
      if (mark[0] === "retry" && outcome.kind === "defer") {
        log("INFO", "inbox: message deferred", { ...fields, reason: outcome.reason, next_attempt_at: mark[1].toISOString() });
      } else if (mark[0] === "retry") {
        log("WARN", "inbox: message failed, will retry", { ...fields, reason: outcome.reason });
      } else if (mark[0] === "quarantine") {
        log("WARN", "inbox: message quarantined", { ...fields, reason: mark[1] });
      }
    }
    return decided.length;
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
    if (outcome.kind === "done") await client.query("RELEASE SAVEPOINT inbox_row");
    else await client.query("ROLLBACK TO SAVEPOINT inbox_row");
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
    this.wake();
    return rows.map((r) => r.id);
  }
}

module.exports = { Inbox, DONE, defer, fail, migrate, settingsFromEnv, log };

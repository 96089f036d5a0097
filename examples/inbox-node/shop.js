// The example shop receiver in Node.js (Express, pg, standardwebhooks): the same application
// as the Rust `hookstream_inbox::demo` and examples/inbox-python, on the same table.
//
//   DATABASE_URL=postgresql://... INBOX_SECRETS="whsec_..." node shop.js
//
// Prints `listening on http://HOST:PORT/PATH` once it accepts requests (INBOX_LISTEN=127.0.0.1:0
// picks a port); `GET /metrics` answers the inbox's metrics in the Prometheus text format.
// SIGTERM or SIGINT stop it: the server stops accepting, the workers finish their batch, and
// it exits 0.
"use strict";

const express = require("express");
const { Pool } = require("pg");
const { Registry } = require("prom-client");
const inbox = require("./inbox");

const SCHEMA_SQL = `
CREATE TABLE IF NOT EXISTS shop_orders (
    id          bigint PRIMARY KEY,
    status      text NOT NULL CHECK (status IN ('paid', 'shipped')),
    paid_at     timestamptz,
    shipped_at  timestamptz
);
CREATE TABLE IF NOT EXISTS shop_log (
    message_id   text NOT NULL,
    event_type   text,
    order_id     bigint,
    processed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);`;

// order.paid makes the order paid; order.shipped ships a paid order and waits (defers) for one
// that is not paid yet. Every processed message adds one shop_log row.
async function shop(client, m) {
  const raw = m.payload && typeof m.payload === "object" ? m.payload.order_id : undefined;
  const order = Number.isInteger(raw) ? raw : null;
  if (m.eventType === "order.paid" && order !== null) {
    await client.query(
      `INSERT INTO shop_orders (id, status, paid_at) VALUES ($1, 'paid', clock_timestamp())
       ON CONFLICT (id) DO UPDATE SET paid_at = clock_timestamp()`,
      [order],
    );
  } else if (m.eventType === "order.shipped" && order !== null) {
    const { rows } = await client.query("SELECT status FROM shop_orders WHERE id = $1 FOR UPDATE", [order]);
    if (rows.length === 0) return inbox.defer(`order ${order} not paid yet`);
    await client.query("UPDATE shop_orders SET status = 'shipped', shipped_at = clock_timestamp() WHERE id = $1", [order]);
  } else if (m.eventType === "order.paid" || m.eventType === "order.shipped") {
    return inbox.fail(`${m.eventType} without a numeric order_id`);
  }
  await client.query("INSERT INTO shop_log (message_id, event_type, order_id) VALUES ($1, $2, $3)", [
    m.messageId,
    m.eventType,
    order,
  ]);
  return inbox.DONE;
}

async function main() {
  const url = process.env.DATABASE_URL;
  if (!url) {
    console.error("shop.js: DATABASE_URL is required");
    process.exit(2);
  }
  let settings;
  try {
    settings = inbox.settingsFromEnv();
  } catch (e) {
    console.error(`shop.js: ${e.message}`);
    process.exit(2);
  }
  const listen = process.env.INBOX_LISTEN || "127.0.0.1:8090";
  const at = listen.lastIndexOf(":");
  const [host, port] = [listen.slice(0, at), Number.parseInt(listen.slice(at + 1), 10)];
  const route = process.env.INBOX_PATH || "/webhooks/hookstream";

  const pool = new Pool({ connectionString: url, max: settings.workers + 8 });
  pool.on("error", (e) => inbox.log("WARN", "idle database connection failed", { error: e.message }));
  await inbox.migrate(pool);
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await client.query("SELECT pg_advisory_xact_lock(hashtext('hookstream_inbox.demo'))");
    await client.query(SCHEMA_SQL);
    await client.query("COMMIT");
  } finally {
    client.release();
  }
  const registry = new Registry();
  const receiver = new inbox.Inbox(pool, settings, shop, new inbox.InboxMetrics(registry));

  const app = express();
  // The request's arrival, before the body is read (the acknowledgement histogram).
  const arrived = (req, _res, next) => {
    req.arrived = process.hrtime.bigint();
    next();
  };
  // The exact bytes, whatever the content type; larger bodies get 413 before being read.
  const body = express.raw({ type: () => true, limit: settings.maxBodyBytes });
  app.post(route, arrived, body, async (req, res) => {
    const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    const [status, text] = await receiver.receive(raw, req.headers, req.arrived);
    res.status(status).send(text);
  });
  app.get("/metrics", async (_req, res) => {
    res.set("content-type", registry.contentType).send(await registry.metrics());
  });
  app.use((err, req, res, _next) => {
    const status = err.status || err.statusCode || 500;
    if (status === 413) {
      const [s, text] = receiver.tooLarge();
      res.status(s).send(text);
      return;
    }
    res.status(status).send(err.message);
  });

  const server = app.listen(port, host, () => {
    const { port: bound } = server.address();
    console.log(`listening on http://${host}:${bound}${route}`);
  });
  receiver.start();

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    server.close();
    server.closeAllConnections();
    await receiver.shutdown();
    await pool.end();
    console.log("stopped");
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((e) => {
  console.error(`shop.js: ${e.stack || e}`);
  process.exit(1);
});

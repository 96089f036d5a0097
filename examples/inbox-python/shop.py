"""The example shop receiver in Python (Flask, psycopg 3, standardwebhooks): the same
application as the Rust `hookstream_inbox::demo` and examples/inbox-node, on the same table.

    DATABASE_URL=postgresql://... INBOX_SECRETS="whsec_..." python shop.py

Prints `listening on http://HOST:PORT/PATH` once it accepts requests (INBOX_LISTEN=127.0.0.1:0
picks a port); `GET /metrics` answers the inbox's metrics in the Prometheus text format.
SIGTERM or SIGINT stop it: the server stops accepting, the workers finish their batch, and it
exits 0.
"""

import logging
import os
import signal
import sys
import threading
import time

import prometheus_client
from flask import Flask, Response, request
from psycopg_pool import ConnectionPool
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.serving import make_server

import inbox

SCHEMA_SQL = """
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
);
"""


def shop(conn, m: inbox.Message):
    """order.paid makes the order paid; order.shipped ships a paid order and waits (defers)
    for one that is not paid yet. Every processed message adds one shop_log row."""
    order = m.payload.get("order_id") if isinstance(m.payload, dict) else None
    if not isinstance(order, int) or isinstance(order, bool):
        order = None
    if m.event_type == "order.paid" and order is not None:
        conn.execute(
            "INSERT INTO shop_orders (id, status, paid_at) VALUES (%s, 'paid', clock_timestamp())"
            " ON CONFLICT (id) DO UPDATE SET paid_at = clock_timestamp()",
            (order,),
        )
    elif m.event_type == "order.shipped" and order is not None:
        row = conn.execute("SELECT status FROM shop_orders WHERE id = %s FOR UPDATE", (order,)).fetchone()
        if row is None:
            return inbox.Defer(f"order {order} not paid yet")
        conn.execute("UPDATE shop_orders SET status = 'shipped', shipped_at = clock_timestamp() WHERE id = %s", (order,))
    elif m.event_type in ("order.paid", "order.shipped"):
        return inbox.Fail(f"{m.event_type} without a numeric order_id")
    conn.execute(
        "INSERT INTO shop_log (message_id, event_type, order_id) VALUES (%s, %s, %s)",
        (m.message_id, m.event_type, order),
    )
    return inbox.DONE


def main() -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stdout,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    url = os.environ.get("DATABASE_URL")
    if not url:
        print("shop.py: DATABASE_URL is required", file=sys.stderr)
        return 2
    settings = inbox.Settings.from_env()
    host, _, port = os.environ.get("INBOX_LISTEN", "127.0.0.1:8089").rpartition(":")
    path = os.environ.get("INBOX_PATH", "/webhooks/hookstream")

    pool = ConnectionPool(url, min_size=1, max_size=settings.workers + 8, open=True)
    inbox.migrate(pool)
    with pool.connection() as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('hookstream_inbox.demo'))")
        conn.execute(SCHEMA_SQL)
    # No `_created` series: the Rust library exports none either.
    prometheus_client.disable_created_metrics()
    registry = prometheus_client.CollectorRegistry()
    receiver = inbox.Inbox(pool, settings, shop, inbox.InboxMetrics(registry))

    app = Flask("shop")
    # Flask refuses larger bodies with 413 before reading them.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes

    @app.post(path)
    def webhook():
        started = time.monotonic()
        try:
            raw = request.get_data(cache=False)
        except RequestEntityTooLarge:
            status, text = receiver.too_large()
            return text, status
        status, text = receiver.receive(raw, request.headers, started)
        return text, status

    @app.get("/metrics")
    def metrics():
        # The classic text format, as the Rust and Node receivers serve it.
        return Response(prometheus_client.generate_latest(registry),
                        content_type=prometheus_client.exposition.CONTENT_TYPE_PLAIN_0_0_4)

    server = make_server(host, int(port), app, threaded=True)
    receiver.start()

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"listening on http://{host}:{server.server_port}{path}", flush=True)
    server.serve_forever()
    receiver.shutdown()
    pool.close()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A tiny webhook receiver for demos and smoke tests (Python standard library only).

Prints one JSON line per POST on stdout: webhook-id, event type, attempt, body, and whether
the Standard Webhooks v1 signature verified. With WEBHOOK_SECRET (whsec_...) set, a delivery
whose signature does not verify, or whose timestamp is more than 5 minutes off, gets 401;
without it, nothing is verified ("verified": null) and every delivery gets 204.

    WEBHOOK_SECRET=whsec_... python3 receiver.py --addr 127.0.0.1:9000

Used by docker-compose.yml (the demo-receiver service) and scripts/check/image.sh.
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_S = 300


def verify(secret, msg_id, timestamp, signature_header, body):
    """True if one `v1,<base64>` entry of the header signs `id.timestamp.body` with the secret."""
    if not (msg_id and timestamp and signature_header):
        return False
    try:
        if abs(time.time() - int(timestamp)) > TOLERANCE_S:
            return False
        key = base64.b64decode(secret.removeprefix("whsec_"))
    except ValueError:
        return False
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for entry in signature_header.split():
        version, _, sig = entry.partition(",")
        if version == "v1" and hmac.compare_digest(sig, expected):
            return True
    return False


class Handler(BaseHTTPRequestHandler):
    secret = os.environ.get("WEBHOOK_SECRET", "")

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        h = self.headers
        verified = (
            verify(self.secret, h.get("webhook-id"), h.get("webhook-timestamp"), h.get("webhook-signature"), body)
            if self.secret
            else None
        )
        try:
            payload = json.loads(body)
        except ValueError:
            payload = body.decode("utf-8", "replace")
        line = {
            "webhook_id": h.get("webhook-id"),
            "event_type": h.get("hookstream-event-type"),
            "attempt": h.get("hookstream-attempt"),
            "verified": verified,
            "path": self.path,
            "body": payload,
        }
        print(json.dumps(line), flush=True)
        self.send_response(401 if verified is False else 204)
        self.end_headers()

    def do_GET(self):  # noqa: N802 — health check
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *args):  # one JSON line per delivery is the whole output
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:9000", help="host:port to listen on (port 0: any free port)")
    args = parser.parse_args()
    host, _, port = args.addr.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # as PID 1 in a container too
    print(f"listening on http://{host}:{server.server_address[1]}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

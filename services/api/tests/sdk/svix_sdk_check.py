"""Drives Hookstream's API with the official Svix Python SDK (PyPI `svix`), unchanged.

Run by services/api/tests/sdk.rs with HOOKSTREAM_API_URL and HOOKSTREAM_API_TOKEN set. Creates
an application and an endpoint pointing at a receiver of its own, sends messages and checks
each delivery's signature with the SDK's own verifier and the secret the SDK reads back, lists
attempts, rotates the secret and checks the next delivery carries both signatures, recovers
failed deliveries, and pages through 250 messages. Then what a team moving from Svix uses
every day (issue 40): custom endpoint headers (sent on every delivery, sensitive ones never
read back), channels and tags, scheduled sends (`deliverAt`, never early, within a second),
payload filters (Hookstream's extension, through plain HTTP: the SDK has no field for them)
and payloads delivered byte for byte, replay of what an endpoint missed while disabled, bulk replay,
and the background tasks they return, and operational webhooks (an operator's and a tenant's).
Exits non-zero on the first failure.
"""

import datetime
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from svix.api import (
    ApplicationIn,
    BackgroundTaskListOptions,
    BackgroundTaskType,
    BulkReplayIn,
    EndpointIn,
    EndpointHeadersIn,
    EndpointHeadersPatchIn,
    EndpointPatch,
    EndpointSecretRotateIn,
    MessageAttemptListByMsgOptions,
    MessageGetOptions,
    MessageIn,
    MessageListOptions,
    OperationalWebhookEndpointIn,
    RecoverIn,
    ReplayIn,
    Svix,
    SvixOptions,
)
from svix.models import MessageStatus
from svix.webhooks import Webhook, WebhookVerificationError

SERVER = os.environ["HOOKSTREAM_API_URL"]
TOKEN = os.environ["HOOKSTREAM_API_TOKEN"]


def step(msg):
    print(f"[sdk] {msg}", flush=True)


def wait(what, check, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Receiver:
    """An HTTP receiver on 127.0.0.1:0 that records every request; answers `status`."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.status = 204
        # When each webhook-id first arrived (wall clock, as deliverAt is).
        self.times = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                at = time.time()
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver.lock:
                    receiver.times.setdefault(self.headers.get("webhook-id"), at)
                    receiver.requests.append((dict(self.headers.items()), body))
                    status = receiver.status
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def of(self, msg_id):
        with self.lock:
            return [(h, b) for h, b in self.requests if h.get("webhook-id") == msg_id]


def verify(secret, headers, body):
    """The SDK's verifier (raises unless a signature matches); returns the payload."""
    wanted = {k.lower(): v for k, v in headers.items() if k.lower().startswith("webhook-")}
    Webhook(secret).verify(body, wanted)
    return json.loads(body)


def main():
    svix = Svix(TOKEN, SvixOptions(server_url=SERVER))
    receiver = Receiver()

    app = svix.application.create(ApplicationIn(name="SDK test", uid="sdk-test"))
    assert app.uid == "sdk-test", app
    again = svix.application.get_or_create(ApplicationIn(name="SDK test", uid="sdk-test"))
    assert again.id == app.id, (again, app)
    step(f"application {app.id}")
    ep = svix.endpoint.create(app.id, EndpointIn(url=receiver.url, description="sdk receiver"))
    assert svix.endpoint.get(app.id, ep.id).description == "sdk receiver"
    secret = svix.endpoint.get_secret(app.id, ep.id).key
    assert secret.startswith("whsec_"), secret
    step(f"endpoint {ep.id}, secret read back")

    sent = []
    for i in range(3):
        m = svix.message.create(app.id, MessageIn(event_type="invoice.paid", payload={"n": i, "text": "héllo"}))
        # SDKs v2 ask for no content unless told.
        assert svix.message.get(app.id, m.id).payload == {}
        got = svix.message.get(app.id, m.id, MessageGetOptions(with_content=True))
        assert got.payload == {"n": i, "text": "héllo"}, got
        sent.append(m)
    for m in sent:
        headers, body = wait(f"delivery of {m.id}", lambda: (receiver.of(m.id) or [None])[0])
        payload = verify(secret, headers, body)
        assert payload["text"] == "héllo", payload
    step("3 messages delivered, each verified by the SDK's Webhook with the secret it read back")

    def attempted(msg_id):
        page = svix.message_attempt.list_by_msg(app.id, msg_id, MessageAttemptListByMsgOptions())
        return page.data if page.data else None

    attempts = wait("the attempts in the delivery log", lambda: attempted(sent[0].id))
    assert attempts[0].status == MessageStatus.SUCCESS, attempts[0]
    assert attempts[0].response_status_code == 204, attempts[0]
    assert attempts[0].endpoint_id == ep.id
    step(f"attempts listed: {len(attempts)} for {sent[0].id}, status {attempts[0].status.name}")

    svix.endpoint.rotate_secret(app.id, ep.id, EndpointSecretRotateIn())
    new_secret = svix.endpoint.get_secret(app.id, ep.id).key
    assert new_secret != secret
    m = svix.message.create(app.id, MessageIn(event_type="invoice.paid", payload={"after": "rotation"}))
    headers, body = wait("the delivery after the rotation", lambda: (receiver.of(m.id) or [None])[0])
    signatures = headers["webhook-signature"].split(" ")
    assert len(signatures) == 2, headers["webhook-signature"]
    # Each secret verifies on its own: both signatures are there.
    verify(secret, headers, body)
    verify(new_secret, headers, body)
    try:
        verify("whsec_" + "A" * 43 + "=", headers, body)
        raise AssertionError("a wrong secret verified")
    except WebhookVerificationError:
        pass
    step("after the rotation the delivery carries both signatures (old and new secret each verify)")

    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
    with receiver.lock:
        receiver.status = 400  # a permanent failure: dead-lettered at once
    failing = [
        svix.message.create(app.id, MessageIn(event_type="invoice.paid", payload={"fail": i})) for i in range(2)
    ]
    http = httpx.Client(base_url=SERVER, headers={"authorization": f"Bearer {TOKEN}"})

    def dead_lettered():
        r = http.get(f"/api/v1/app/{app.id}/dead-letter", params={"endpoint_id": ep.id})
        r.raise_for_status()
        ids = {d["msgId"] for d in r.json()["data"]}
        return all(f.id in ids for f in failing)

    wait("the failed deliveries among the dead letters", dead_lettered)
    for f in failing:
        # The attempt sink and the DLQ sink store on their own: wait for the attempt too.
        failed = wait(f"the failed attempt of {f.id}", lambda: attempted(f.id))
        assert failed[0].status == MessageStatus.FAIL, failed
        assert failed[0].response_status_code == 400, failed
    with receiver.lock:
        receiver.status = 204
    task = svix.endpoint.recover(app.id, ep.id, RecoverIn(since=since))
    assert task.status.value == "running", task
    for f in failing:
        wait(f"the recovery of {f.id}", lambda: len(receiver.of(f.id)) >= 2)
        headers, body = receiver.of(f.id)[-1]
        verify(new_secret, headers, body)
    step("2 failed deliveries recovered (same webhook-id, verified)")

    ids = set()
    for i in range(250):
        ids.add(svix.message.create(app.id, MessageIn(event_type="page.test", payload={"i": i})).id)
    seen = []
    iterator = None
    pages = 0
    while True:
        page = svix.message.list(app.id, MessageListOptions(limit=100, iterator=iterator))
        seen.extend(m.id for m in page.data)
        pages += 1
        if page.done:
            break
        iterator = page.iterator
    assert len(seen) == len(set(seen)), "no message twice"
    assert ids <= set(seen), f"{len(ids - set(seen))} of the 250 missing"
    assert pages >= 3, pages
    step(f"paged through {len(seen)} messages in {pages} pages of 100")
    migration_features(svix, http, app)
    print(json.dumps({"ok": True, "messages": len(seen)}), flush=True)


def migration_features(svix, http, app):
    """Headers, channels, tags, deliverAt, payload filters and byte-exact payloads."""
    # Custom headers: given at creation, changed with set/patch, sent on every delivery.
    hr = Receiver()
    hep = svix.endpoint.create(
        app.id,
        EndpointIn(url=hr.url, headers={"Authorization": "Bearer tok3n-s3cret", "X-Team": "payments"}),
    )
    shown = svix.endpoint.get_headers(app.id, hep.id)
    assert shown.headers == {"X-Team": "payments"}, shown
    assert shown.sensitive == ["Authorization"], shown
    svix.endpoint.patch_headers(app.id, hep.id, EndpointHeadersPatchIn(headers={"X-Extra": "1"}))
    shown = svix.endpoint.get_headers(app.id, hep.id)
    assert shown.headers == {"X-Extra": "1", "X-Team": "payments"}, shown
    assert "tok3n" not in json.dumps(http.get(f"/api/v1/app/{app.id}/endpoint/{hep.id}").json())
    m = svix.message.create(app.id, MessageIn(event_type="invoice.paid", payload={"h": 1}))
    headers, _ = wait("the delivery with custom headers", lambda: (hr.of(m.id) or [None])[0])
    lower = {k.lower(): v for k, v in headers.items()}
    assert lower.get("authorization") == "Bearer tok3n-s3cret", headers
    assert lower.get("x-team") == "payments" and lower.get("x-extra") == "1", headers
    svix.endpoint.set_headers(app.id, hep.id, EndpointHeadersIn(headers={"X-Only": "this"}))
    m = svix.message.create(app.id, MessageIn(event_type="invoice.paid", payload={"h": 2}))
    headers, _ = wait("the delivery after set_headers", lambda: (hr.of(m.id) or [None])[0])
    lower = {k.lower(): v for k, v in headers.items()}
    assert lower.get("x-only") == "this" and "authorization" not in lower, headers
    try:
        svix.endpoint.set_headers(app.id, hep.id, EndpointHeadersIn(headers={"webhook-signature": "x"}))
        raise AssertionError("a reserved header was taken")
    except Exception as e:  # noqa: BLE001 - the SDK's HTTPValidationError
        assert "webhook-signature" in str(getattr(e, "detail", e)) or "422" in str(e), e
    svix.endpoint.delete(app.id, hep.id)
    step("custom headers: sent on every delivery, Authorization listed as sensitive and never read back")

    # Channels (Svix's rule) and tags.
    eu, anyr = Receiver(), Receiver()
    ep_eu = svix.endpoint.create(app.id, EndpointIn(url=eu.url, channels=["eu"]))
    ep_any = svix.endpoint.create(app.id, EndpointIn(url=anyr.url))
    assert svix.endpoint.get(app.id, ep_eu.id).channels == ["eu"]
    to_eu = svix.message.create(app.id, MessageIn(event_type="order.created", payload={"c": "eu"}, channels=["eu", "x"], tags=["vip"]))
    to_us = svix.message.create(app.id, MessageIn(event_type="order.created", payload={"c": "us"}, channels=["us"]))
    to_none = svix.message.create(app.id, MessageIn(event_type="order.created", payload={"c": None}))
    for m in (to_eu, to_us, to_none):
        wait(f"{m.id} at the endpoint without channels", lambda: anyr.of(m.id))
    wait("the eu message at the eu endpoint", lambda: eu.of(to_eu.id))
    time.sleep(2)
    assert not eu.of(to_us.id) and not eu.of(to_none.id), "the eu endpoint got a message of another or no channel"
    got = svix.message.get(app.id, to_eu.id)
    assert got.channels == ["eu", "x"] and got.tags == ["vip"], got
    tagged = svix.message.list(app.id, MessageListOptions(tag="vip")).data
    assert [t.id for t in tagged] == [to_eu.id], tagged
    tagged_attempts = wait(
        "the tagged message's attempts",
        lambda: http.get(f"/api/v1/app/{app.id}/attempt/endpoint/{ep_any.id}", params={"tag": "vip"}).json()["data"],
    )
    assert {a["msgId"] for a in tagged_attempts} == {to_eu.id}, tagged_attempts
    by_channel = svix.message.list(app.id, MessageListOptions(channel="us")).data
    assert [t.id for t in by_channel] == [to_us.id], by_channel
    svix.endpoint.delete(app.id, ep_eu.id)
    svix.endpoint.delete(app.id, ep_any.id)
    step("channels: the eu endpoint got only the eu message, the endpoint without channels all three; tags list")

    # Scheduled sends: never before deliverAt, and at most a second after it.
    sr = Receiver()
    sep = svix.endpoint.create(app.id, EndpointIn(url=sr.url))
    scheduled = []
    for i in range(6):
        at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=3 + i)
        m = svix.message.create(app.id, MessageIn(event_type="reminder.due", payload={"i": i}, deliver_at=at))
        scheduled.append((m, at.timestamp()))
    got = svix.message.get(app.id, scheduled[0][0].id)
    assert got.deliver_at is not None, got
    late = []
    for m, at in scheduled:
        wait(f"the scheduled {m.id}", lambda: sr.of(m.id), timeout=60)
        first = sr.times[m.id]
        assert first >= at, f"{m.id} delivered {at - first:.3f} s early"
        late.append(first - at)
    assert max(late) <= 1.0, f"late by {max(late):.3f} s"
    svix.endpoint.delete(app.id, sep.id)
    step(f"deliverAt: 6 messages, none early, latest {max(late) * 1000:.0f} ms after its time")

    # Payload filters (an extension: plain HTTP), and an event filtered out is not an attempt.
    fr = Receiver()
    r = http.post(
        f"/api/v1/app/{app.id}/endpoint",
        json={"url": fr.url, "filter": {"amount": {"$gte": 10}, "currency": {"$in": ["EUR", "USD"]}}},
    )
    assert r.status_code == 201, r.text
    fep = r.json()["id"]
    small = svix.message.create(app.id, MessageIn(event_type="charge.made", payload={"amount": 5, "currency": "EUR"}))
    big = svix.message.create(app.id, MessageIn(event_type="charge.made", payload={"amount": 50, "currency": "EUR"}))
    wait("the charge that passes the filter", lambda: fr.of(big.id))
    time.sleep(2)
    assert not fr.of(small.id), "a payload the filter refuses was delivered"
    page = http.get(f"/api/v1/app/{app.id}/attempt/endpoint/{fep}").json()["data"]
    assert {a["msgId"] for a in page} == {big.id}, page
    bad = http.post(f"/api/v1/app/{app.id}/endpoint", json={"url": fr.url, "filter": {"amount": {"$gte": []}}})
    assert bad.status_code == 422 and "/amount/$gte" in bad.text, bad.text
    http.delete(f"/api/v1/app/{app.id}/endpoint/{fep}")
    step("payload filters: only the matching charge delivered, the other no attempt; a bad filter points at its part")

    # Byte for byte: the payload's text as sent is the text delivered and signed.
    br = Receiver()
    bep = svix.endpoint.create(app.id, EndpointIn(url=br.url))
    bsecret = svix.endpoint.get_secret(app.id, bep.id).key
    exact = '{"zeta":1,  "alpha":2.50,"n":1e2,"u":"\\u00e9"}'
    body = '{"eventType": "exact.bytes", "payload": ' + exact + "}"
    r = http.post(f"/api/v1/app/{app.id}/msg", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 202, r.text
    mid = r.json()["id"]
    headers, got_body = wait("the byte-exact delivery", lambda: (br.of(mid) or [None])[0])
    assert got_body == exact.encode(), (got_body, exact)
    verify(bsecret, headers, got_body)
    stored = http.get(f"/api/v1/app/{app.id}/msg/{mid}", params={"with_content": "true"})
    assert exact in stored.text, stored.text
    step("a payload with unusual spacing, number formats and escapes arrives byte for byte, signed over those bytes")

    replays(svix, app)
    operational(svix, http, app)


def replays(svix, app):
    """replay-missing, bulk-replay and the background tasks they return."""
    rr = Receiver()
    rep = svix.endpoint.create(app.id, EndpointIn(url=rr.url, event_types=["replay.test"]))
    rsecret = svix.endpoint.get_secret(app.id, rep.id).key
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    svix.endpoint.patch(app.id, rep.id, EndpointPatch(disabled=True))
    time.sleep(1.5)  # the dispatchers' routing view follows within a second
    missed = [svix.message.create(app.id, MessageIn(event_type="replay.test", payload={"m": i})) for i in range(3)]
    other = svix.message.create(app.id, MessageIn(event_type="not.subscribed", payload={}))
    time.sleep(2)
    assert not any(rr.of(m.id) for m in missed), "a disabled endpoint got a message"
    svix.endpoint.patch(app.id, rep.id, EndpointPatch(disabled=False))
    time.sleep(1.5)
    live = svix.message.create(app.id, MessageIn(event_type="replay.test", payload={"m": "live"}))
    wait("the live delivery", lambda: rr.of(live.id))

    def finished(task_id):
        t = svix.background_task.get(task_id)
        assert t.status.value != "failed", t
        return t if t.status.value == "finished" else None

    task = svix.endpoint.replay_missing(app.id, rep.id, ReplayIn(since=since))
    assert task.task == BackgroundTaskType.ENDPOINT_REPLAY and task.status.value == "running", task
    done = wait("the replay task to finish", lambda: finished(task.id))
    assert done.data["messagesSent"] == 3, done
    for m in missed:
        headers, body = wait(f"the replay of {m.id}", lambda: (rr.of(m.id) or [None])[0])
        assert headers["webhook-id"] == m.id
        verify(rsecret, headers, body)
    time.sleep(1)
    assert len(rr.of(live.id)) == 1, "replay-missing sent a message the endpoint had"
    assert not rr.of(other.id), "replay-missing sent an event type the endpoint does not take"
    step("replay-missing: the 3 messages sent while disabled arrived once each (same webhook-id); task finished")

    # Once the replays are attempts, nothing is missing any more.
    for m in missed:
        wait(
            f"the replayed attempt of {m.id}",
            lambda: [a for a in svix.message_attempt.list_by_msg(app.id, m.id).data if a.endpoint_id == rep.id],
        )
    again = svix.endpoint.replay_missing(app.id, rep.id, ReplayIn(since=since))
    assert wait("the second replay", lambda: finished(again.id)).data["messagesSent"] == 0
    bulk = svix.endpoint.bulk_replay(app.id, rep.id, BulkReplayIn(since=since, status=MessageStatus.SUCCESS))
    assert bulk.task == BackgroundTaskType.ENDPOINT_BULK_REPLAY, bulk
    assert wait("the bulk replay", lambda: finished(bulk.id)).data["messagesSent"] == 4
    for m in missed + [live]:
        wait(f"the bulk replay of {m.id}", lambda: len(rr.of(m.id)) >= 2)
    listed = svix.background_task.list(BackgroundTaskListOptions(task=BackgroundTaskType.ENDPOINT_REPLAY)).data
    assert {task.id, again.id} <= {t.id for t in listed}, listed
    assert bulk.id not in {t.id for t in listed}, "the list's task filter let another kind through"
    svix.endpoint.delete(app.id, rep.id)
    step("a second replay-missing sends nothing; bulk-replay resent all 4 delivered; tasks listed by type")



def events_at(rx, secret):
    """The operational events `rx` got, each verified with `secret`."""
    with rx.lock:
        got = list(rx.requests)
    return [verify(secret, h, b) for h, b in got]


def operational(svix, http, app):
    """Operational webhooks: endpoint.* and message.attempt.*, Svix's shapes, signed with the
    operational endpoint's own secret; a tenant's operational endpoint sees only its own."""
    orx = Receiver()
    oep = svix.operational_webhook.endpoint.create(OperationalWebhookEndpointIn(url=orx.url, description="ops"))
    osecret = svix.operational_webhook.endpoint.get_secret(oep.id).key
    assert svix.operational_webhook.endpoint.get(oep.id).description == "ops"
    # A tenant's own operational endpoint, through a key of the application's tenant.
    r = http.post(f"/api/v1/app/{app.id}/api-key", json={"name": "ops"})
    assert r.status_code == 201, r.text
    tenant = Svix(r.json()["token"], SvixOptions(server_url=SERVER))
    trx = Receiver()
    tep = tenant.operational_webhook.endpoint.create(
        OperationalWebhookEndpointIn(url=trx.url, event_types=["endpoint.created", "endpoint.deleted"])
    )
    tsecret = tenant.operational_webhook.endpoint.get_secret(tep.id).key
    assert [e.id for e in tenant.operational_webhook.endpoint.list().data] == [tep.id], "a tenant sees only its own"
    assert {oep.id, tep.id} <= {e.id for e in svix.operational_webhook.endpoint.list().data}
    other = svix.application.create(ApplicationIn(name="SDK other"))

    target = Receiver()
    ep = svix.endpoint.create(app.id, EndpointIn(url=target.url, uid="watched"))
    svix.endpoint.patch(app.id, ep.id, EndpointPatch(description="changed"))
    svix.endpoint.patch(app.id, ep.id, EndpointPatch(disabled=True))
    svix.endpoint.patch(app.id, ep.id, EndpointPatch(disabled=False))
    oth = svix.endpoint.create(other.id, EndpointIn(url=target.url))

    def of_type(events, kind, **data):
        return [e for e in events if e["type"] == kind and all(e["data"].get(k) == v for k, v in data.items())]

    for kind in ("endpoint.created", "endpoint.updated", "endpoint.disabled", "endpoint.enabled"):
        wait(f"{kind} at the operator's endpoint", lambda: of_type(events_at(orx, osecret), kind, endpointId=ep.id))
    created = of_type(events_at(orx, osecret), "endpoint.created", endpointId=ep.id)[0]
    assert created["data"] == {"appId": app.id, "appUid": "sdk-test", "endpointId": ep.id, "endpointUid": "watched"}, created
    disabled = of_type(events_at(orx, osecret), "endpoint.disabled", endpointId=ep.id)[0]
    assert disabled["data"]["trigger"] == "manual", disabled
    wait("the other application's endpoint.created", lambda: of_type(events_at(orx, osecret), "endpoint.created", endpointId=oth.id))
    wait("endpoint.created at the tenant's endpoint", lambda: of_type(events_at(trx, tsecret), "endpoint.created", endpointId=ep.id))
    time.sleep(1)
    tevents = events_at(trx, tsecret)
    assert all(e["data"]["appId"] == app.id for e in tevents), f"another tenant's event reached a tenant: {tevents}"
    assert {e["type"] for e in tevents} == {"endpoint.created"}, f"the tenant's event-type filter let through {tevents}"
    step("operational webhooks: endpoint.created/updated/disabled/enabled in Svix's shape, signed; a tenant's sees only its own")

    # A message that fails for good: failing (at the configured failure), then exhausted.
    with target.lock:
        target.status = 500
    m = svix.message.create(app.id, MessageIn(event_type="ops.test", payload={"x": 1}, event_id="ops-evt-1"))
    exhausted = wait(
        "message.attempt.exhausted",
        lambda: of_type(events_at(orx, osecret), "message.attempt.exhausted", msgId=m.id),
        timeout=90,
    )[0]
    failing = of_type(events_at(orx, osecret), "message.attempt.failing", msgId=m.id)
    assert failing, "message.attempt.failing before the last failure"
    data = exhausted["data"]
    assert (data["appId"], data["endpointId"], data["msgEventId"]) == (app.id, ep.id, "ops-evt-1"), data
    assert data["lastAttempt"]["responseStatusCode"] == 500, data
    attempt = svix.message_attempt.get(app.id, m.id, data["lastAttempt"]["id"])
    assert attempt.response_status_code == 500, attempt
    # One that fails, then succeeds: recovered.
    m2 = svix.message.create(app.id, MessageIn(event_type="ops.test", payload={"x": 2}))
    wait("two failures of the second message", lambda: len(target.of(m2.id)) >= 2)
    with target.lock:
        target.status = 204
    wait(
        "message.attempt.recovered",
        lambda: of_type(events_at(orx, osecret), "message.attempt.recovered", msgId=m2.id),
        timeout=90,
    )
    assert not any(b.startswith(b'{"data"') for _, b in target.requests), "an operational event reached the endpoint it is about"
    svix.endpoint.delete(app.id, ep.id)
    wait("endpoint.deleted", lambda: of_type(events_at(trx, tsecret), "endpoint.deleted", endpointId=ep.id))
    svix.operational_webhook.endpoint.delete(oep.id)
    tenant.operational_webhook.endpoint.delete(tep.id)
    step("message.attempt.failing, .exhausted (its lastAttempt readable by id) and .recovered; endpoint.deleted")

if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - the test reads the message
        print(f"[sdk] FAILED: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        raise

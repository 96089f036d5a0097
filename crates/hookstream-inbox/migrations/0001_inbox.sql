-- The receiving side's inbox: every verified webhook a receiver accepted, stored before it
-- answered 2xx, and its processing state. It lives in the receiver's own database, in the
-- schema `hookstream_inbox` (so that it never mixes with the application's tables or its
-- migration history). Rust receivers apply this file with `hookstream_inbox::migrate`; other
-- languages apply it as it is, in one transaction, at start-up (every statement is
-- idempotent, and the advisory lock below makes concurrent starts wait for each other).
-- docs/receiving.md documents every column and the queries that use them.

SELECT pg_advisory_xact_lock(hashtext('hookstream_inbox.migrate'));

CREATE SCHEMA IF NOT EXISTS hookstream_inbox;

CREATE TABLE IF NOT EXISTS hookstream_inbox.inbox (
    id                bigserial PRIMARY KEY,
    -- Who sent it (one receiver may take webhooks from several senders); part of the key.
    source            text NOT NULL,
    -- The sender's `webhook-id`: stable across retries and replays, so the dedup key.
    message_id        text NOT NULL,
    -- `hookstream-event-type` when the sender sent it, else the payload's top-level "type".
    event_type        text,
    -- The ordering key (say, the aggregate id) when the receiver orders per key: then only
    -- the oldest pending row of a key is processed, one at a time.
    ordering_key      text,
    -- The body exactly as received (the json type keeps the text as it was; verified JSON).
    payload           json NOT NULL,
    -- `webhook-timestamp` of the accepted delivery (Unix seconds).
    webhook_timestamp bigint NOT NULL,
    received_at       timestamptz NOT NULL DEFAULT now(),
    -- pending: waits for (or is in) processing; processed: the handler's change committed
    -- with this state; quarantined: gave up (see last_reason) until someone replays it.
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'processed', 'quarantined')),
    -- Not claimed before this time (a deferral's or a failure's backoff).
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    -- Since when it has been pending (received, or replayed): the deferral age bound.
    pending_since     timestamptz NOT NULL DEFAULT now(),
    -- Failures (handler errors) and deferrals since it became pending.
    attempts          integer NOT NULL DEFAULT 0,
    deferrals         integer NOT NULL DEFAULT 0,
    -- The last deferral's or failure's reason; the quarantine reason once quarantined.
    last_reason       text,
    processed_at      timestamptz,
    quarantined_at    timestamptz,
    -- Times it was taken out of quarantine to be processed again.
    replays           integer NOT NULL DEFAULT 0,
    CONSTRAINT inbox_source_message_id_key UNIQUE (source, message_id)
);

-- What workers claim: pending rows of a source, earliest due first.
CREATE INDEX IF NOT EXISTS inbox_pending_due_idx
    ON hookstream_inbox.inbox (source, next_attempt_at) WHERE status = 'pending';
-- The head of each ordering key (ordered receivers).
CREATE INDEX IF NOT EXISTS inbox_pending_key_idx
    ON hookstream_inbox.inbox (source, ordering_key, id)
    WHERE status = 'pending' AND ordering_key IS NOT NULL;
-- Retention: processed rows past the dedup window.
CREATE INDEX IF NOT EXISTS inbox_processed_at_idx
    ON hookstream_inbox.inbox (processed_at) WHERE status = 'processed';
-- Listing quarantined rows.
CREATE INDEX IF NOT EXISTS inbox_quarantined_idx
    ON hookstream_inbox.inbox (source, quarantined_at) WHERE status = 'quarantined';

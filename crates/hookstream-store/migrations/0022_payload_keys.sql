-- Payloads sealed at rest, and erasure that reaches every copy (issue 41.9).
--
-- Each payload is sealed (AES-256-GCM) with a data key of its tenant, of the subject the
-- producer names (a customer id, say) if any, and of the day it is due. The data keys live here,
-- themselves sealed by the master key (`secrets.key`); Kafka, the dead-letter store and the
-- message store hold only ciphertext. Erasing a tenant or a subject, or a day passing the
-- message retention, destroys the data keys: no copy anywhere opens after that, without
-- rewriting a topic. See `hookstream_store::payload_keys` and docs/security.md.

CREATE TABLE hookstream.payload_keys (
    id             uuid PRIMARY KEY,
    -- A deleted tenant takes its keys with it: its payloads are erased too.
    tenant_id      uuid NOT NULL REFERENCES hookstream.tenants(id) ON DELETE CASCADE,
    -- SHA-256 of the producer's subject; NULL for the tenant's own key. The subject itself is
    -- not kept.
    subject_digest bytea,
    -- Payloads due on this UTC day are sealed with this key; retention erases it with the day.
    day            date NOT NULL,
    -- The master key that seals the data key (rotation re-seals: `hookstream secrets seal`).
    -- Both NULL once erased.
    master_key_id  text,
    sealed         bytea,
    created_at     timestamptz NOT NULL DEFAULT now(),
    erased_at      timestamptz,
    CHECK ((erased_at IS NULL) = (sealed IS NOT NULL AND master_key_id IS NOT NULL))
);
-- One live key per tenant, subject and day; after an erasure the next payload gets a new one.
CREATE UNIQUE INDEX payload_keys_live_idx
    ON hookstream.payload_keys (tenant_id, coalesce(subject_digest, ''::bytea), day)
    WHERE erased_at IS NULL;
CREATE INDEX payload_keys_day_idx ON hookstream.payload_keys (day) WHERE erased_at IS NULL;

-- Every erasure, for audit: who asked, what it reached.
CREATE TABLE hookstream.erasures (
    id               bigserial PRIMARY KEY,
    tenant_id        uuid NOT NULL,
    -- tenant: every payload of the tenant; subject: those of one subject (its digest here);
    -- message: one message's stored copy; retention: the days past the message retention.
    scope            text NOT NULL CHECK (scope IN ('tenant', 'subject', 'message', 'retention')),
    subject_digest   bytea,
    event_id         uuid,
    -- Who asked: "cli", "api:<key id>", "portal:<session>", "retention".
    actor            text NOT NULL,
    keys_erased      integer NOT NULL DEFAULT 0,
    -- Outbox rows not shipped yet, and message-store copies, of the erased scope.
    outbox_deleted   integer NOT NULL DEFAULT 0,
    messages_erased  integer NOT NULL DEFAULT 0,
    erased_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX erasures_tenant_idx ON hookstream.erasures (tenant_id, erased_at);
-- Replay and resend refuse a message erased on its own (`scope = 'message'`).
CREATE INDEX erasures_event_idx ON hookstream.erasures (event_id) WHERE event_id IS NOT NULL;

-- The producer's subject rides on the outbox row until the relay seals the payload, and so
-- does whether the message store kept a copy (the relay seals that copy too; it is sent the
-- sealed bytes only when there is one).
ALTER TABLE hookstream.outbox ADD COLUMN subject text, ADD COLUMN stored boolean NOT NULL DEFAULT true;
ALTER TABLE hookstream.outbox_quarantine ADD COLUMN subject text;

-- The message store keeps the sealed payload once the relay shipped the row (`body` is NULL
-- then); `body` holds the text only between the producer's commit and the relay's.
-- `erased_at`: when its content was erased (expunged, or its tenant's or subject's erasure):
-- it is not resent or replayed after that.
ALTER TABLE hookstream.messages
    ADD COLUMN body_sealed bytea,
    ADD COLUMN payload_key uuid,
    ADD COLUMN erased_at   timestamptz;

-- Svix's expunge-all-contents answers with a background task (finished at once here).
ALTER TABLE hookstream.background_tasks DROP CONSTRAINT background_tasks_kind_check;
ALTER TABLE hookstream.background_tasks ADD CONSTRAINT background_tasks_kind_check
    CHECK (kind IN ('endpoint.replay', 'endpoint.bulk-replay', 'endpoint.recover', 'application.purge_content'));

-- `hookstream.enqueue` (text form) takes the subject as its last argument. Its checks are those
-- of migration 0017, plus the subject's length.
DROP FUNCTION hookstream.enqueue(uuid, text, text, text, text, jsonb, text, text[], timestamptz);
CREATE FUNCTION hookstream.enqueue(
    p_tenant_id       uuid,
    p_event_type      text,
    p_payload         text,
    p_aggregate_type  text DEFAULT '',
    p_aggregate_id    text DEFAULT '',
    p_headers         jsonb DEFAULT '{}',
    p_idempotency_key text DEFAULT NULL,
    p_channels        text[] DEFAULT NULL,
    p_deliver_at      timestamptz DEFAULT NULL,
    p_subject         text DEFAULT NULL
) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_id    uuid := hookstream.uuid_v7_at(v_now);
    v_limit integer;
    v_store boolean;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM hookstream.tenants WHERE id = p_tenant_id) THEN
        RAISE EXCEPTION 'unknown tenant %', p_tenant_id USING ERRCODE = 'HS001';
    END IF;
    IF p_event_type IS NULL OR length(p_event_type) > 200
       OR p_event_type !~ '^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$' THEN
        RAISE EXCEPTION 'invalid event type %: use dot-separated words of letters, digits, _ and -',
            quote_literal(coalesce(p_event_type, '')) USING ERRCODE = 'HS002';
    END IF;
    IF p_payload IS NULL OR json_typeof(p_payload::json) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object' USING ERRCODE = 'HS003';
    END IF;
    SELECT max_payload_bytes, store_messages INTO v_limit, v_store FROM hookstream.settings;
    IF octet_length(p_payload) > v_limit THEN
        RAISE EXCEPTION 'payload of % bytes exceeds the limit of % bytes', octet_length(p_payload), v_limit
            USING ERRCODE = 'HS004';
    END IF;
    IF p_headers IS NULL OR jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'headers must be a JSON object' USING ERRCODE = 'HS005';
    END IF;
    IF p_channels IS NOT NULL AND (cardinality(p_channels) > 10 OR EXISTS (
           SELECT 1 FROM unnest(p_channels) c WHERE c IS NULL OR c !~ '^[a-zA-Z0-9_.:-]{1,128}$')) THEN
        RAISE EXCEPTION 'channels: at most 10, each 1 to 128 letters, digits or -_.:' USING ERRCODE = 'HS007';
    END IF;
    IF p_deliver_at IS NOT NULL AND p_deliver_at > v_now + interval '30 days' THEN
        RAISE EXCEPTION 'deliver_at % is more than 30 days ahead', p_deliver_at USING ERRCODE = 'HS008';
    END IF;
    IF p_subject IS NOT NULL AND octet_length(p_subject) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'subject must be 1 to 255 bytes' USING ERRCODE = 'HS010';
    END IF;
    IF p_idempotency_key IS NOT NULL THEN
        IF length(p_idempotency_key) NOT BETWEEN 1 AND 255 THEN
            RAISE EXCEPTION 'idempotency key must be 1 to 255 characters' USING ERRCODE = 'HS006';
        END IF;
        -- A concurrent transaction with the same key waits here for the first to finish.
        INSERT INTO hookstream.idempotency_keys (tenant_id, key, event_id)
        VALUES (p_tenant_id, p_idempotency_key, v_id)
        ON CONFLICT (tenant_id, key) DO NOTHING;
        IF NOT FOUND THEN
            RETURN (SELECT event_id FROM hookstream.idempotency_keys
                     WHERE tenant_id = p_tenant_id AND key = p_idempotency_key);
        END IF;
    END IF;
    INSERT INTO hookstream.outbox (event_id, tenant_id, event_type, aggregate_type, aggregate_id, payload, headers,
                                   channels, deliver_at, subject, stored)
    VALUES (v_id, p_tenant_id, p_event_type, coalesce(p_aggregate_type, ''), coalesce(p_aggregate_id, ''),
            p_payload, p_headers, nullif(p_channels, '{}'), p_deliver_at, p_subject, v_store);
    IF v_store THEN
        INSERT INTO hookstream.messages (tenant_id, event_id, created_at, event_type, aggregate_type, aggregate_id,
                                         body, idempotency_key, channels, deliver_at)
        VALUES (p_tenant_id, v_id, v_now, p_event_type, coalesce(p_aggregate_type, ''),
                coalesce(p_aggregate_id, ''), p_payload, p_idempotency_key, nullif(p_channels, '{}'), p_deliver_at);
    END IF;
    RETURN v_id;
END $$;

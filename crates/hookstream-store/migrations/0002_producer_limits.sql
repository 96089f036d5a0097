-- Producer-side guarantees: idempotency keys, a configurable payload limit, and typed errors.
-- Errors raised by hookstream.enqueue use SQLSTATEs of class HS so clients in any language
-- can tell them apart:
--   HS001 unknown tenant          HS002 invalid event type     HS003 payload not a JSON object
--   HS004 payload too large       HS005 headers not an object   HS006 invalid idempotency key

-- One row of installation-wide settings.
CREATE TABLE hookstream.settings (
    singleton          boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    -- Largest payload accepted by enqueue, in bytes of its JSON text.
    max_payload_bytes  integer NOT NULL DEFAULT 1048576 CHECK (max_payload_bytes > 0)
);
INSERT INTO hookstream.settings DEFAULT VALUES;

-- Enqueuing the same key twice for a tenant returns the first event's id and writes nothing.
CREATE TABLE hookstream.idempotency_keys (
    tenant_id   uuid NOT NULL,
    key         text NOT NULL,
    event_id    uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_keys_created_idx ON hookstream.idempotency_keys (created_at);

DROP FUNCTION hookstream.enqueue(uuid, text, jsonb, text, text, jsonb);

CREATE FUNCTION hookstream.enqueue(
    p_tenant_id       uuid,
    p_event_type      text,
    p_payload         jsonb,
    p_aggregate_type  text DEFAULT '',
    p_aggregate_id    text DEFAULT '',
    p_headers         jsonb DEFAULT '{}',
    p_idempotency_key text DEFAULT NULL
) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_id    uuid := hookstream.uuid_v7();
    v_size  integer;
    v_limit integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM hookstream.tenants WHERE id = p_tenant_id) THEN
        RAISE EXCEPTION 'unknown tenant %', p_tenant_id USING ERRCODE = 'HS001';
    END IF;
    IF p_event_type IS NULL OR length(p_event_type) > 200
       OR p_event_type !~ '^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$' THEN
        RAISE EXCEPTION 'invalid event type %: use dot-separated words of letters, digits, _ and -',
            quote_literal(coalesce(p_event_type, '')) USING ERRCODE = 'HS002';
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object' USING ERRCODE = 'HS003';
    END IF;
    v_size := octet_length(p_payload::text);
    SELECT max_payload_bytes INTO v_limit FROM hookstream.settings;
    IF v_size > v_limit THEN
        RAISE EXCEPTION 'payload of % bytes exceeds the limit of % bytes', v_size, v_limit USING ERRCODE = 'HS004';
    END IF;
    IF p_headers IS NULL OR jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'headers must be a JSON object' USING ERRCODE = 'HS005';
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
    INSERT INTO hookstream.outbox (event_id, tenant_id, event_type, aggregate_type, aggregate_id, payload, headers)
    VALUES (v_id, p_tenant_id, p_event_type, coalesce(p_aggregate_type, ''), coalesce(p_aggregate_id, ''),
            p_payload, p_headers);
    RETURN v_id;
END $$;

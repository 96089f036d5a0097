-- What a team moving from Svix expects (issue 40): payloads delivered byte for byte, channels
-- and tags on messages, scheduled sends, and on endpoints channels, custom headers and payload
-- filters.

-- Payloads keep the producer's bytes. The outbox held jsonb, which reorders keys, rewrites
-- numbers and spacing; it now holds the text as written (the outbox is short-lived, so the
-- rewrite of its rows is cheap). `hookstream.enqueue` validates the text as a JSON object once;
-- the relay ships it as it is.
ALTER TABLE hookstream.outbox ALTER COLUMN payload TYPE text USING payload::text;
ALTER TABLE hookstream.outbox_quarantine ALTER COLUMN payload TYPE text USING payload::text;
-- Channels the message is sent to (NULL: none) and the time its first attempt is due (NULL: at
-- once). The relay carries both in the envelope.
ALTER TABLE hookstream.outbox
    ADD COLUMN channels   text[],
    ADD COLUMN deliver_at timestamptz;
ALTER TABLE hookstream.outbox_quarantine
    ADD COLUMN channels   text[],
    ADD COLUMN deliver_at timestamptz;

-- The message store keeps the exact text in `body`, beside the jsonb `payload` of rows written
-- before (read as `coalesce(body, payload::text)`), so the big partitioned table is not
-- rewritten.
ALTER TABLE hookstream.messages
    ALTER COLUMN payload DROP NOT NULL,
    ADD COLUMN body       text,
    ADD COLUMN channels   text[],
    ADD COLUMN tags       text[],
    ADD COLUMN deliver_at timestamptz;
-- Message lists filter by tag and by channel (Svix's `tag` and `channel` parameters).
CREATE INDEX messages_tags_idx ON hookstream.messages USING gin (tags) WHERE tags IS NOT NULL;
CREATE INDEX messages_channels_idx ON hookstream.messages USING gin (channels) WHERE channels IS NOT NULL;

-- Endpoints: channels (empty: every message, Svix's rule), a payload filter (NULL: none), and
-- custom headers sent on every delivery, sealed like the URL (AES-256-GCM, the endpoint id as
-- associated data) because they carry receivers' credentials. `header_names` are the names
-- only, for lists and limits; values exist in clear only in the dispatcher's memory and in the
-- API's answer to its owner (sensitive ones never).
ALTER TABLE hookstream.endpoints
    ADD COLUMN channels       text[] NOT NULL DEFAULT '{}',
    ADD COLUMN payload_filter jsonb CHECK (payload_filter IS NULL OR jsonb_typeof(payload_filter) = 'object'),
    ADD COLUMN headers_sealed bytea,
    ADD COLUMN headers_key_id text,
    ADD COLUMN header_names   text[] NOT NULL DEFAULT '{}';

-- The producers' entry point, taking the payload as text: the bytes given are the bytes
-- delivered and signed. Also takes the message's channels and a time before which it is not
-- delivered. Checks as before (migration 0002; the API's set-based statement in
-- `messages::ENQUEUE_MANY` repeats them: change both together); a text that is not JSON is
-- refused by PostgreSQL's own parser (SQLSTATE 22P02), one that is not an object with HS003.
CREATE FUNCTION hookstream.enqueue(
    p_tenant_id       uuid,
    p_event_type      text,
    p_payload         text,
    p_aggregate_type  text DEFAULT '',
    p_aggregate_id    text DEFAULT '',
    p_headers         jsonb DEFAULT '{}',
    p_idempotency_key text DEFAULT NULL,
    p_channels        text[] DEFAULT NULL,
    p_deliver_at      timestamptz DEFAULT NULL
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
                                   channels, deliver_at)
    VALUES (v_id, p_tenant_id, p_event_type, coalesce(p_aggregate_type, ''), coalesce(p_aggregate_id, ''),
            p_payload, p_headers, nullif(p_channels, '{}'), p_deliver_at);
    IF v_store THEN
        INSERT INTO hookstream.messages (tenant_id, event_id, created_at, event_type, aggregate_type, aggregate_id,
                                         body, idempotency_key, channels, deliver_at)
        VALUES (p_tenant_id, v_id, v_now, p_event_type, coalesce(p_aggregate_type, ''),
                coalesce(p_aggregate_id, ''), p_payload, p_idempotency_key, nullif(p_channels, '{}'), p_deliver_at);
    END IF;
    RETURN v_id;
END $$;

-- The jsonb form keeps its signature and errors for existing callers; its payload is the
-- jsonb's text (a jsonb value has already lost the producer's formatting: pass text to keep
-- it). A plain SQL wrapper, inlined by the planner, so there is one implementation.
CREATE OR REPLACE FUNCTION hookstream.enqueue(
    p_tenant_id       uuid,
    p_event_type      text,
    p_payload         jsonb,
    p_aggregate_type  text DEFAULT '',
    p_aggregate_id    text DEFAULT '',
    p_headers         jsonb DEFAULT '{}',
    p_idempotency_key text DEFAULT NULL
) RETURNS uuid LANGUAGE sql AS $$
    SELECT hookstream.enqueue(p_tenant_id, p_event_type, p_payload::text, p_aggregate_type, p_aggregate_id,
                              p_headers, p_idempotency_key, NULL::text[], NULL::timestamptz)
$$;

-- Channels, the payload filter and the headers are routing state: a change to them bumps the
-- subscription version like the columns before (migration 0005), so an event committed after
-- the change is routed and sent with it.
DROP TRIGGER endpoints_changed ON hookstream.endpoints;
CREATE TRIGGER endpoints_changed
    AFTER INSERT OR DELETE OR UPDATE OF tenant_id, url, url_sealed, url_key_id, event_types, enabled,
                                        rate_limit_per_s, timeout_ms, max_in_flight, channels,
                                        payload_filter, headers_sealed, headers_key_id
    ON hookstream.endpoints
    FOR EACH ROW EXECUTE FUNCTION hookstream.subscription_changed('endpoint', 'id');

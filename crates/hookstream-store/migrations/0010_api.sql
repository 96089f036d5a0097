-- What the admin API (services/api, wire-compatible with Svix's API v1) needs: applications'
-- and endpoints' uid and metadata, tenant API keys, the event-type catalogue, and the message
-- store (the outbox row is deleted once relayed, so messages are kept here to be read back).

-- An application is a tenant. `uid` is the caller's own unique name for it (paths accept the
-- id or the uid); never UUID-shaped, so a path segment is unambiguous.
ALTER TABLE hookstream.tenants
    ADD COLUMN uid        text UNIQUE CHECK (length(uid) BETWEEN 1 AND 256 AND uid ~ '^[a-zA-Z0-9_.-]+$'),
    ADD COLUMN metadata   jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();

ALTER TABLE hookstream.endpoints
    ADD COLUMN uid      text CHECK (length(uid) BETWEEN 1 AND 256 AND uid ~ '^[a-zA-Z0-9_.-]+$'),
    ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    ADD CONSTRAINT endpoints_tenant_uid UNIQUE (tenant_id, uid);

-- Tenant API keys (and app-portal tokens): a key sees only its tenant. Only the SHA-256 of a
-- key is stored; `prefix` is its visible start, so people can tell keys apart in a list.
CREATE TABLE hookstream.api_keys (
    id            uuid PRIMARY KEY,
    tenant_id     uuid NOT NULL REFERENCES hookstream.tenants(id) ON DELETE CASCADE,
    -- 'tenant': made by an operator (CLI or API); 'portal': minted for an app-portal session.
    kind          text NOT NULL CHECK (kind IN ('tenant', 'portal')),
    name          text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    prefix        text NOT NULL,
    hash          bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
    read_only     boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    last_used_at  timestamptz,
    revoked_at    timestamptz
);
CREATE INDEX api_keys_tenant_idx ON hookstream.api_keys (tenant_id, created_at);

-- The event-type catalogue (installation-wide, like a Svix organisation's): descriptions and
-- example payloads (`schemas`, Svix's shape: {"1": {JSON schema with "examples": [...]}}).
-- Archiving keeps the row; messages of an archived type are refused when the API enforces the
-- catalogue.
CREATE TABLE hookstream.event_types (
    name          text PRIMARY KEY
                  CHECK (length(name) <= 200 AND name ~ '^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$'),
    description   text NOT NULL,
    schemas       jsonb CHECK (schemas IS NULL OR jsonb_typeof(schemas) = 'object'),
    archived      boolean NOT NULL DEFAULT false,
    deprecated    boolean NOT NULL DEFAULT false,
    feature_flag  text,
    group_name    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- The message store: every event enqueued (by any producer, or the API), written by
-- hookstream.enqueue in the producer's own transaction, so a message can be read back at once
-- and after the relay deleted its outbox row. Partitioned by UTC day of created_at: retention
-- drops whole days (the API's maintenance creates days ahead and drops old ones). A default
-- partition catches rows of a day with no partition yet, so a producer never fails for it.
-- created_at is the time the event id (UUIDv7) encodes, to the millisecond: a lookup by id
-- knows its partition.
CREATE TABLE hookstream.messages (
    tenant_id        uuid NOT NULL,
    event_id         uuid NOT NULL,
    created_at       timestamptz NOT NULL,
    event_type       text NOT NULL,
    aggregate_type   text NOT NULL,
    aggregate_id     text NOT NULL,
    payload          jsonb NOT NULL,
    -- The producer's idempotency key (the API's `eventId`).
    idempotency_key  text,
    -- The `idempotency-key` header of the API request that created it: a retry of that request
    -- gets the message back, another request with the same eventId a conflict.
    request_key      text,
    PRIMARY KEY (tenant_id, event_id, created_at)
) PARTITION BY RANGE (created_at);
CREATE TABLE hookstream.messages_default PARTITION OF hookstream.messages DEFAULT;

-- Whether hookstream.enqueue stores messages (an installation without the API may turn it off).
ALTER TABLE hookstream.settings ADD COLUMN store_messages boolean NOT NULL DEFAULT true;

-- A UUIDv7 for a given time (hookstream.uuid_v7 is this at clock_timestamp()).
CREATE FUNCTION hookstream.uuid_v7_at(ts timestamptz) RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    ms bigint := floor(extract(epoch FROM ts) * 1000);
    b  bytea  := uuid_send(gen_random_uuid());
BEGIN
    b := overlay(b PLACING substring(int8send(ms) FROM 3) FROM 1 FOR 6);
    b := set_byte(b, 6, (get_byte(b, 6) & 15) | 112);
    RETURN encode(b, 'hex')::uuid;
END $$;

-- The time a UUIDv7 encodes (milliseconds).
CREATE FUNCTION hookstream.uuid_v7_time(id uuid) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT to_timestamp((('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint)::float8 / 1000) $$;

-- Enqueueing for the API: hookstream.enqueue's checks (migration 0002), the outbox row, and the
-- message row with the request's key. Also says whether the event is new (false: its
-- idempotency key had been used, and out_id is the first event's) and, for an existing one,
-- the API request key that created it.
CREATE FUNCTION hookstream.enqueue_message(
    p_tenant_id       uuid,
    p_event_type      text,
    p_payload         jsonb,
    p_aggregate_type  text,
    p_aggregate_id    text,
    p_headers         jsonb,
    p_idempotency_key text,
    p_request_key     text,
    OUT out_id        uuid,
    OUT out_created   boolean,
    OUT out_request   text
) LANGUAGE plpgsql AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_size  integer;
    v_limit integer;
    v_store boolean;
BEGIN
    out_id := hookstream.uuid_v7_at(v_now);
    out_created := true;
    out_request := p_request_key;
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
    SELECT max_payload_bytes, store_messages INTO v_limit, v_store FROM hookstream.settings;
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
        VALUES (p_tenant_id, p_idempotency_key, out_id)
        ON CONFLICT (tenant_id, key) DO NOTHING;
        IF NOT FOUND THEN
            out_created := false;
            SELECT k.event_id INTO out_id FROM hookstream.idempotency_keys k
             WHERE k.tenant_id = p_tenant_id AND k.key = p_idempotency_key;
            SELECT m.request_key INTO out_request FROM hookstream.messages m
             WHERE m.tenant_id = p_tenant_id AND m.event_id = out_id
               AND m.created_at >= hookstream.uuid_v7_time(out_id) - interval '1 second'
               AND m.created_at < hookstream.uuid_v7_time(out_id) + interval '1 second';
            RETURN;
        END IF;
    END IF;
    INSERT INTO hookstream.outbox (event_id, tenant_id, event_type, aggregate_type, aggregate_id, payload, headers)
    VALUES (out_id, p_tenant_id, p_event_type, coalesce(p_aggregate_type, ''), coalesce(p_aggregate_id, ''),
            p_payload, p_headers);
    IF v_store THEN
        INSERT INTO hookstream.messages (tenant_id, event_id, created_at, event_type, aggregate_type, aggregate_id,
                                         payload, idempotency_key, request_key)
        VALUES (p_tenant_id, out_id, v_now, p_event_type, coalesce(p_aggregate_type, ''),
                coalesce(p_aggregate_id, ''), p_payload, p_idempotency_key, p_request_key);
    END IF;
END $$;

-- The producers' entry point keeps its signature and errors (migration 0002) and now also
-- stores the message. It repeats enqueue_message's body rather than call it: a wrapper cost
-- producers about a tenth of their enqueue throughput (docs/benchmarks.md). Change both together.
CREATE OR REPLACE FUNCTION hookstream.enqueue(
    p_tenant_id       uuid,
    p_event_type      text,
    p_payload         jsonb,
    p_aggregate_type  text DEFAULT '',
    p_aggregate_id    text DEFAULT '',
    p_headers         jsonb DEFAULT '{}',
    p_idempotency_key text DEFAULT NULL
) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_id    uuid := hookstream.uuid_v7_at(v_now);
    v_size  integer;
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
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object' USING ERRCODE = 'HS003';
    END IF;
    v_size := octet_length(p_payload::text);
    SELECT max_payload_bytes, store_messages INTO v_limit, v_store FROM hookstream.settings;
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
    IF v_store THEN
        INSERT INTO hookstream.messages (tenant_id, event_id, created_at, event_type, aggregate_type, aggregate_id,
                                         payload, idempotency_key)
        VALUES (p_tenant_id, v_id, v_now, p_event_type, coalesce(p_aggregate_type, ''),
                coalesce(p_aggregate_id, ''), p_payload, p_idempotency_key);
    END IF;
    RETURN v_id;
END $$;

-- The partition of one UTC day, created if missing. Gives up (returns false) rather than wait
-- more than two seconds for the lock producers hold while they write, and skips a day whose
-- rows already landed in the default partition (they stay there until retention deletes them).
CREATE FUNCTION hookstream.ensure_message_partition(day date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    name text := 'messages_' || to_char(day, 'YYYYMMDD');
    low timestamptz := day::timestamp AT TIME ZONE 'UTC';
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('hookstream.messages partitions'));
    IF to_regclass('hookstream.' || name) IS NOT NULL THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM hookstream.messages_default
                WHERE created_at >= low AND created_at < low + interval '1 day') THEN
        RETURN false;
    END IF;
    PERFORM set_config('lock_timeout', '2000', true);
    EXECUTE format(
        'CREATE TABLE hookstream.%I PARTITION OF hookstream.messages FOR VALUES FROM (%L) TO (%L)',
        name, low, low + interval '1 day');
    RETURN true;
END $$;

-- Drops the day partitions before `before` (UTC), and deletes the default partition's rows
-- older than that; returns the partitions' names.
CREATE FUNCTION hookstream.drop_message_partitions(before date) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    part text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('hookstream.messages partitions'));
    PERFORM set_config('lock_timeout', '2000', true);
    FOR part IN
        SELECT c.relname
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        JOIN pg_namespace n ON n.oid = p.relnamespace
        WHERE n.nspname = 'hookstream' AND p.relname = 'messages'
          AND c.relname ~ '^messages_[0-9]{8}$'
          AND to_date(substr(c.relname, 10), 'YYYYMMDD') < before
        ORDER BY c.relname
    LOOP
        EXECUTE format('DROP TABLE hookstream.%I', part);
        RETURN NEXT part;
    END LOOP;
    DELETE FROM hookstream.messages_default WHERE created_at < before::timestamp AT TIME ZONE 'UTC';
END $$;

-- Today and the next week exist from the start.
SELECT hookstream.ensure_message_partition(d::date)
  FROM generate_series((now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7,
                       interval '1 day') d;

-- The API pages through the messages an endpoint was sent, newest message first.
CREATE INDEX attempts_endpoint_event ON hookstream.attempts (endpoint_id, event_id);

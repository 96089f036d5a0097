-- Hookstream's schema: tenants, endpoints and their secrets, the transactional outbox and
-- its quarantine. Everything lives in the `hookstream` schema so it can share a database
-- with the producer's own tables (the outbox must be in the producer's transaction).

CREATE SCHEMA IF NOT EXISTS hookstream;

CREATE TABLE hookstream.tenants (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE hookstream.endpoints (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES hookstream.tenants(id) ON DELETE CASCADE,
    url             text NOT NULL CHECK (url ~ '^https?://'),
    description     text NOT NULL DEFAULT '',
    -- Event-type filters: exact types, `prefix.*`, or `*`. Empty means every type.
    event_types     text[] NOT NULL DEFAULT '{}',
    enabled         boolean NOT NULL DEFAULT true,
    disabled_reason text,
    -- Requests per second; NULL means no limit.
    rate_limit_per_s integer CHECK (rate_limit_per_s IS NULL OR rate_limit_per_s > 0),
    timeout_ms      integer NOT NULL DEFAULT 15000 CHECK (timeout_ms BETWEEN 100 AND 30000),
    max_in_flight   integer NOT NULL DEFAULT 32 CHECK (max_in_flight BETWEEN 1 AND 1000),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX endpoints_tenant_idx ON hookstream.endpoints (tenant_id);

-- Several secrets per endpoint during a rotation: every unexpired one signs.
CREATE TABLE hookstream.endpoint_secrets (
    id          bigserial PRIMARY KEY,
    endpoint_id uuid NOT NULL REFERENCES hookstream.endpoints(id) ON DELETE CASCADE,
    secret      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz
);
CREATE INDEX endpoint_secrets_endpoint_idx ON hookstream.endpoint_secrets (endpoint_id);

-- Number of outbox shards. Fixed at install time: each shard has one relay owner at a time,
-- and an aggregate always hashes to the same shard, which keeps per-aggregate order.
CREATE FUNCTION hookstream.shard_count() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 16 $$;

CREATE FUNCTION hookstream.shard_of(p_tenant uuid, p_aggregate text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT (abs(hashtextextended(p_tenant::text || '/' || p_aggregate, 0)) % hookstream.shard_count())::integer $$;

CREATE TABLE hookstream.outbox (
    id              bigserial PRIMARY KEY,
    event_id        uuid NOT NULL,
    tenant_id       uuid NOT NULL,
    event_type      text NOT NULL,
    aggregate_type  text NOT NULL DEFAULT '',
    aggregate_id    text NOT NULL DEFAULT '',
    payload         jsonb NOT NULL,
    headers         jsonb NOT NULL DEFAULT '{}',
    shard           integer GENERATED ALWAYS AS (hookstream.shard_of(tenant_id, aggregate_id)) STORED,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX outbox_shard_id_idx ON hookstream.outbox (shard, id);

-- Rows the relay could not ship (unknown tenant, payload not a JSON object, too large for
-- the topic). They never block their shard; an operator inspects them here.
CREATE TABLE hookstream.outbox_quarantine (
    id              bigint PRIMARY KEY,
    event_id        uuid NOT NULL,
    tenant_id       uuid NOT NULL,
    event_type      text NOT NULL,
    aggregate_type  text NOT NULL,
    aggregate_id    text NOT NULL,
    payload         jsonb NOT NULL,
    headers         jsonb NOT NULL,
    created_at      timestamptz NOT NULL,
    reason          text NOT NULL,
    quarantined_at  timestamptz NOT NULL DEFAULT now()
);

-- Time-ordered UUIDs (v7) so event ids sort by creation time. PostgreSQL 15 has no uuidv7().
CREATE FUNCTION hookstream.uuid_v7() RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
    b  bytea  := uuid_send(gen_random_uuid());
BEGIN
    b := overlay(b PLACING substring(int8send(ms) FROM 3) FROM 1 FOR 6);
    b := set_byte(b, 6, (get_byte(b, 6) & 15) | 112);  -- version 7; variant bits come from v4
    RETURN encode(b, 'hex')::uuid;
END $$;

-- The producer's entry point, for any language: call it inside the transaction that makes
-- the business change. Errors use SQLSTATE class 22/23 with a readable message.
CREATE FUNCTION hookstream.enqueue(
    p_tenant_id      uuid,
    p_event_type     text,
    p_payload        jsonb,
    p_aggregate_type text DEFAULT '',
    p_aggregate_id   text DEFAULT '',
    p_headers        jsonb DEFAULT '{}'
) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid := hookstream.uuid_v7();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM hookstream.tenants WHERE id = p_tenant_id) THEN
        RAISE EXCEPTION 'unknown tenant %', p_tenant_id USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF p_event_type IS NULL OR p_event_type !~ '^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$' OR length(p_event_type) > 200 THEN
        RAISE EXCEPTION 'invalid event type %: use dot-separated words of letters, digits, _ and -', quote_literal(coalesce(p_event_type, ''))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_headers IS NULL OR jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'headers must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO hookstream.outbox (event_id, tenant_id, event_type, aggregate_type, aggregate_id, payload, headers)
    VALUES (v_id, p_tenant_id, p_event_type, coalesce(p_aggregate_type, ''), coalesce(p_aggregate_id, ''), p_payload, p_headers);
    RETURN v_id;
END $$;

-- Wake the relay when rows are committed (NOTIFY is delivered at commit, once per
-- transaction per payload). A wake-up only: the relay also polls.
CREATE FUNCTION hookstream.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookstream_outbox', '');
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_notify AFTER INSERT ON hookstream.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION hookstream.outbox_notify();

-- Tell dispatchers to refresh their subscription snapshot.
CREATE FUNCTION hookstream.subscriptions_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookstream_subscriptions', '');
    RETURN NULL;
END $$;
CREATE TRIGGER tenants_notify AFTER INSERT OR UPDATE OR DELETE ON hookstream.tenants
    FOR EACH STATEMENT EXECUTE FUNCTION hookstream.subscriptions_notify();
CREATE TRIGGER endpoints_notify AFTER INSERT OR UPDATE OR DELETE ON hookstream.endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION hookstream.subscriptions_notify();
CREATE TRIGGER endpoint_secrets_notify AFTER INSERT OR UPDATE OR DELETE ON hookstream.endpoint_secrets
    FOR EACH STATEMENT EXECUTE FUNCTION hookstream.subscriptions_notify();

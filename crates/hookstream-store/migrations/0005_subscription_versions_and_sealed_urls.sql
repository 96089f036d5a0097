-- Subscription versions: every change that can alter routing (a tenant, an endpoint's
-- routing columns, a secret) bumps one counter in the changing transaction and records what
-- changed. The relay stamps each event with the counter as of its claim, which sees every
-- transaction committed before the event's; a dispatcher routes an event only with a
-- snapshot at least that new. So an event committed after its endpoint is never routed
-- without it. The change log also makes the dispatchers' refresh incremental.

CREATE TABLE hookstream.subscription_state (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    -- Bumped (row-locked until commit) by every routing change: committed values are exactly
    -- the changes committed so far, in order.
    version    bigint NOT NULL DEFAULT 0
);
INSERT INTO hookstream.subscription_state DEFAULT VALUES;

CREATE TABLE hookstream.subscription_changes (
    version     bigint PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('tenant', 'endpoint')),
    entity_id   uuid NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscription_changes_changed_at_idx ON hookstream.subscription_changes (changed_at);

DROP TRIGGER tenants_notify ON hookstream.tenants;
DROP TRIGGER endpoints_notify ON hookstream.endpoints;
DROP TRIGGER endpoint_secrets_notify ON hookstream.endpoint_secrets;
DROP FUNCTION hookstream.subscriptions_notify();

-- TG_ARGV[0]: the kind; TG_ARGV[1]: the column holding the entity's id.
CREATE FUNCTION hookstream.subscription_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_version bigint;
    v_entity  uuid;
BEGIN
    IF TG_OP = 'DELETE' THEN
        v_entity := (to_jsonb(OLD) ->> TG_ARGV[1])::uuid;
    ELSE
        v_entity := (to_jsonb(NEW) ->> TG_ARGV[1])::uuid;
    END IF;
    UPDATE hookstream.subscription_state SET version = version + 1 RETURNING version INTO v_version;
    INSERT INTO hookstream.subscription_changes (version, kind, entity_id) VALUES (v_version, TG_ARGV[0], v_entity);
    -- A wake-up for the dispatchers (delivered at commit, once per payload per transaction).
    PERFORM pg_notify('hookstream_subscriptions', '');
    RETURN NULL;
END $$;

CREATE TRIGGER tenants_changed AFTER INSERT OR UPDATE OR DELETE ON hookstream.tenants
    FOR EACH ROW EXECUTE FUNCTION hookstream.subscription_changed('tenant', 'id');
-- Only what routing and delivery read: health bookkeeping (failing_since) changes nothing.
CREATE TRIGGER endpoints_changed
    AFTER INSERT OR DELETE OR UPDATE OF tenant_id, url, event_types, enabled, rate_limit_per_s, timeout_ms,
                                        max_in_flight
    ON hookstream.endpoints
    FOR EACH ROW EXECUTE FUNCTION hookstream.subscription_changed('endpoint', 'id');
CREATE TRIGGER endpoint_secrets_changed AFTER INSERT OR UPDATE OR DELETE ON hookstream.endpoint_secrets
    FOR EACH ROW EXECUTE FUNCTION hookstream.subscription_changed('endpoint', 'endpoint_id');

-- Endpoint URLs may carry secrets (a token in the path or the query). The full URL is
-- sealed like the signing secrets (AES-256-GCM, the endpoint id and "url" as associated
-- data); `url` keeps a redacted form for people and logs. Rows written before this stay in
-- clear in `url` until `hookstream secrets seal` runs.
ALTER TABLE hookstream.endpoints
    ADD COLUMN url_sealed bytea,
    ADD COLUMN url_key_id text,
    ADD CONSTRAINT endpoints_url_sealed CHECK ((url_sealed IS NULL) = (url_key_id IS NULL));
DROP TRIGGER endpoints_changed ON hookstream.endpoints;
CREATE TRIGGER endpoints_changed
    AFTER INSERT OR DELETE OR UPDATE OF tenant_id, url, url_sealed, url_key_id, event_types, enabled,
                                        rate_limit_per_s, timeout_ms, max_in_flight
    ON hookstream.endpoints
    FOR EACH ROW EXECUTE FUNCTION hookstream.subscription_changed('endpoint', 'id');

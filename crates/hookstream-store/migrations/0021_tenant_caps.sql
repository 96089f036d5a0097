-- Caps on what one tenant may hold (issue 41.3): endpoints, tenant API keys, live app-portal
-- tokens and live portal sessions. Enforced here, in a trigger, so every writer (the API, the
-- portal, the CLI, plain SQL) meets the same cap; installation-wide defaults in
-- hookstream.settings, per-tenant overrides in hookstream.tenant_limits (NULL: the default).
-- One more than the cap raises SQLSTATE HS009 naming the limit, which the API answers 429
-- `limit_reached`. Concurrent inserts of one tenant are serialised by an advisory lock, so the
-- cap holds exactly.

ALTER TABLE hookstream.settings
    ADD COLUMN max_endpoints_per_tenant       integer NOT NULL DEFAULT 1000  CHECK (max_endpoints_per_tenant > 0),
    ADD COLUMN max_api_keys_per_tenant        integer NOT NULL DEFAULT 100   CHECK (max_api_keys_per_tenant > 0),
    ADD COLUMN max_portal_tokens_per_tenant   integer NOT NULL DEFAULT 10000 CHECK (max_portal_tokens_per_tenant > 0),
    ADD COLUMN max_portal_sessions_per_tenant integer NOT NULL DEFAULT 1000  CHECK (max_portal_sessions_per_tenant > 0);

CREATE TABLE hookstream.tenant_limits (
    tenant_id            uuid PRIMARY KEY REFERENCES hookstream.tenants(id) ON DELETE CASCADE,
    max_endpoints        integer CHECK (max_endpoints > 0),
    max_api_keys         integer CHECK (max_api_keys > 0),
    max_portal_tokens    integer CHECK (max_portal_tokens > 0),
    max_portal_sessions  integer CHECK (max_portal_sessions > 0)
);

-- TG_ARGV[0]: the limit (endpoints, api_keys, portal_tokens, portal_sessions).
CREATE FUNCTION hookstream.enforce_tenant_cap() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_what  text := TG_ARGV[0];
    v_max   integer;
    v_count bigint;
BEGIN
    -- The operational tenant's endpoints are every tenant's operational webhooks, capped per
    -- subscriber by the API (10 each).
    IF NEW.tenant_id = hookstream.operational_tenant() THEN
        RETURN NEW;
    END IF;
    -- Nested: NEW.kind exists on api_keys only (an expression is planned when first run).
    IF v_what = 'api_keys' THEN
        IF NEW.kind <> 'tenant' THEN
            v_what := 'portal_tokens';
        END IF;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('hookstream.cap:' || v_what), hashtext(NEW.tenant_id::text));
    SELECT CASE v_what
             WHEN 'endpoints'       THEN coalesce(l.max_endpoints, s.max_endpoints_per_tenant)
             WHEN 'api_keys'        THEN coalesce(l.max_api_keys, s.max_api_keys_per_tenant)
             WHEN 'portal_tokens'   THEN coalesce(l.max_portal_tokens, s.max_portal_tokens_per_tenant)
             WHEN 'portal_sessions' THEN coalesce(l.max_portal_sessions, s.max_portal_sessions_per_tenant)
           END
      INTO v_max
      FROM hookstream.settings s
      LEFT JOIN hookstream.tenant_limits l ON l.tenant_id = NEW.tenant_id;
    IF v_what = 'endpoints' THEN
        SELECT count(*) INTO v_count FROM hookstream.endpoints WHERE tenant_id = NEW.tenant_id;
    ELSIF v_what = 'portal_sessions' THEN
        SELECT count(*) INTO v_count FROM hookstream.portal_sessions
         WHERE tenant_id = NEW.tenant_id AND expires_at > now();
    ELSE
        SELECT count(*) INTO v_count FROM hookstream.api_keys
         WHERE tenant_id = NEW.tenant_id AND kind = NEW.kind
           AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now());
    END IF;
    IF v_count >= v_max THEN
        RAISE EXCEPTION 'tenant limit reached: at most % %', v_max, replace(v_what, '_', ' ')
            USING ERRCODE = 'HS009',
                  DETAIL = 'max_' || v_what,
                  HINT = 'delete or revoke some, or raise hookstream.tenant_limits.max_' || v_what
                         || ' for this tenant (default: hookstream.settings.max_' || v_what || '_per_tenant)';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER endpoints_cap BEFORE INSERT ON hookstream.endpoints
    FOR EACH ROW EXECUTE FUNCTION hookstream.enforce_tenant_cap('endpoints');
CREATE TRIGGER api_keys_cap BEFORE INSERT ON hookstream.api_keys
    FOR EACH ROW EXECUTE FUNCTION hookstream.enforce_tenant_cap('api_keys');
CREATE TRIGGER portal_sessions_cap BEFORE INSERT ON hookstream.portal_sessions
    FOR EACH ROW EXECUTE FUNCTION hookstream.enforce_tenant_cap('portal_sessions');

-- Operational webhooks (Svix's): events about tenants' endpoints and deliveries, sent to
-- endpoints an operator (every tenant's events) or a tenant (its own) subscribes.
--
-- They are ordinary messages of one reserved tenant, the operational tenant, whose endpoints
-- are the operational-webhook endpoints: the relay, the dispatchers, the retry tiers, the
-- breakers, the SSRF rules and signing treat them like any other. An event about tenant T is
-- sent on channel `tenant.<T>`: a tenant's operational endpoint listens on its own channel
-- only, an operator's on none (so it gets every tenant's). The operational tenant's own
-- endpoints and attempts raise no events (nothing is ever sent about the endpoint it goes
-- to, and a failing operational endpoint cannot feed itself).
--
-- Events are written by triggers, in the transaction of the change they describe (an
-- endpoint written by the API, the CLI, the portal or a dispatcher's breaker; an attempt
-- stored by the attempt sink, once per attempt, as its row is new). A trigger that cannot
-- write its event warns and lets the change through: operational webhooks never block an
-- endpoint change or the attempt log.

INSERT INTO hookstream.tenants (id, name)
VALUES ('00000000-0000-0000-0000-0000000000ff', 'hookstream operational webhooks')
ON CONFLICT (id) DO NOTHING;

-- `message.attempt.failing` is sent at this failure of a message at an endpoint (Svix: the
-- fourth), and `message.attempt.recovered` when a message that reached it is delivered.
ALTER TABLE hookstream.settings
    ADD COLUMN operational_failing_after integer NOT NULL DEFAULT 4 CHECK (operational_failing_after >= 1);

CREATE FUNCTION hookstream.operational_tenant() RETURNS uuid LANGUAGE sql IMMUTABLE AS
$$ SELECT '00000000-0000-0000-0000-0000000000ff'::uuid $$;

-- Writes one operational event about `p_tenant` when an operational endpoint could want it.
CREATE FUNCTION hookstream.operational_event(p_tenant uuid, p_type text, p_data jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_tenant = hookstream.operational_tenant() THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM hookstream.endpoints
                    WHERE tenant_id = hookstream.operational_tenant() AND enabled
                      AND (channels IS NULL OR channels = '{}' OR channels @> ARRAY['tenant.' || p_tenant::text])) THEN
        RETURN;
    END IF;
    PERFORM hookstream.enqueue(hookstream.operational_tenant(), p_type,
                               jsonb_build_object('data', p_data, 'type', p_type)::text,
                               'tenant', p_tenant::text, '{}'::jsonb, NULL::text,
                               ARRAY['tenant.' || p_tenant::text], NULL::timestamptz);
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'operational webhook % about tenant % not written: %', p_type, p_tenant, SQLERRM;
END $$;

CREATE FUNCTION hookstream.endpoint_operational_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_row   hookstream.endpoints;
    v_type  text;
    v_data  jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN v_row := OLD; ELSE v_row := NEW; END IF;
    IF v_row.tenant_id = hookstream.operational_tenant() THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        v_type := 'endpoint.created';
    ELSIF TG_OP = 'DELETE' THEN
        v_type := 'endpoint.deleted';
    ELSIF OLD.enabled AND NOT NEW.enabled THEN
        v_type := 'endpoint.disabled';
    ELSIF NEW.enabled AND NOT OLD.enabled THEN
        v_type := 'endpoint.enabled';
    ELSIF (OLD.url_sealed, OLD.url, OLD.description, OLD.event_types, OLD.rate_limit_per_s, OLD.timeout_ms,
           OLD.max_in_flight, OLD.uid, OLD.metadata, OLD.channels, OLD.payload_filter, OLD.headers_sealed)
          IS DISTINCT FROM
          (NEW.url_sealed, NEW.url, NEW.description, NEW.event_types, NEW.rate_limit_per_s, NEW.timeout_ms,
           NEW.max_in_flight, NEW.uid, NEW.metadata, NEW.channels, NEW.payload_filter, NEW.headers_sealed) THEN
        v_type := 'endpoint.updated';
    ELSE
        -- Bookkeeping (failing_since, key rotation of the sealing): not a change of the endpoint.
        RETURN NULL;
    END IF;
    v_data := jsonb_build_object(
        'appId', v_row.tenant_id,
        'appUid', (SELECT uid FROM hookstream.tenants WHERE id = v_row.tenant_id),
        'endpointId', v_row.id,
        'endpointUid', v_row.uid);
    IF v_type = 'endpoint.disabled' THEN
        v_data := v_data || jsonb_build_object(
            'failSince', OLD.failing_since,
            -- The dispatchers' breaker says so in its transaction (`endpoints::disable`).
            'trigger', CASE WHEN current_setting('hookstream.disable_trigger', true) = 'automatic'
                            THEN 'automatic' ELSE 'manual' END);
    END IF;
    PERFORM hookstream.operational_event(v_row.tenant_id, v_type, v_data);
    RETURN NULL;
END $$;

CREATE TRIGGER endpoints_operational_events
    AFTER INSERT OR UPDATE OR DELETE ON hookstream.endpoints
    FOR EACH ROW EXECUTE FUNCTION hookstream.endpoint_operational_event();

-- Svix's attempt id, as the API makes it (`routes/attempts.rs`: `atmpt_` and the URL-safe
-- base64 of the start in microseconds, the message, the endpoint and the attempt number).
CREATE FUNCTION hookstream.attempt_api_id(p_started_at timestamptz, p_event uuid, p_endpoint uuid, p_attempt integer)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT 'atmpt_' || translate(rtrim(replace(encode(
        int8send((extract(epoch FROM p_started_at) * 1000000)::bigint) || uuid_send(p_event)
        || uuid_send(p_endpoint) || int4send(p_attempt), 'base64'), E'\n', ''), '='), '+/', '-_')
$$;

CREATE FUNCTION hookstream.attempt_operational_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_after integer;
    v_type  text;
BEGIN
    IF NEW.tenant_id = hookstream.operational_tenant() THEN
        RETURN NULL;
    END IF;
    SELECT operational_failing_after INTO v_after FROM hookstream.settings;
    IF NEW.next = 'dead_lettered' THEN
        v_type := 'message.attempt.exhausted';
    ELSIF NEW.next = 'retry' AND NEW.attempt = v_after THEN
        v_type := 'message.attempt.failing';
    ELSIF NEW.next = 'delivered' AND NEW.attempt > v_after THEN
        v_type := 'message.attempt.recovered';
    ELSE
        RETURN NULL;
    END IF;
    PERFORM hookstream.operational_event(NEW.tenant_id, v_type, jsonb_build_object(
        'appId', NEW.tenant_id,
        'appUid', (SELECT uid FROM hookstream.tenants WHERE id = NEW.tenant_id),
        'msgId', NEW.event_id,
        -- The message's `eventId` (its idempotency key, unless the API made it from a header).
        'msgEventId', (SELECT CASE WHEN idempotency_key LIKE 'api-request:%' THEN NULL ELSE idempotency_key END
                         FROM hookstream.messages
                        WHERE tenant_id = NEW.tenant_id AND event_id = NEW.event_id
                          AND created_at >= hookstream.uuid_v7_time(NEW.event_id) - interval '1 second'
                          AND created_at < hookstream.uuid_v7_time(NEW.event_id) + interval '1 second'
                        LIMIT 1),
        'endpointId', NEW.endpoint_id,
        'lastAttempt', jsonb_build_object(
            'id', hookstream.attempt_api_id(NEW.started_at, NEW.event_id, NEW.endpoint_id, NEW.attempt),
            'timestamp', NEW.started_at,
            'responseStatusCode', coalesce(NEW.status, 0))));
    RETURN NULL;
END $$;

-- Most attempts (first attempts delivered) are passed over without calling the function.
CREATE TRIGGER attempts_operational_events
    AFTER INSERT ON hookstream.attempts
    FOR EACH ROW WHEN (NEW.next <> 'delivered' OR NEW.attempt > 1)
    EXECUTE FUNCTION hookstream.attempt_operational_event();

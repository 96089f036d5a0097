-- The delivery log: every record of the attempts topic, stored by the dispatchers' attempt
-- sink (role attempt_sink). Partitioned by day of started_at (UTC): retention drops whole
-- partitions, never a DELETE over millions of rows. A record read twice (a sink restarted
-- before committing its offset) has the same key and is stored once.
CREATE TABLE hookstream.attempts (
    started_at          timestamptz NOT NULL,
    event_id            uuid        NOT NULL,
    endpoint_id         uuid        NOT NULL,
    attempt             integer     NOT NULL,
    tenant_id           uuid        NOT NULL,
    -- first, retry, replay, resend ('' for records older than the field)
    trigger             text        NOT NULL,
    duration_ms         integer     NOT NULL,
    -- NULL when no response arrived (timeout, connection refused, ...)
    status              integer,
    -- delivered, retryable, permanent, gone
    outcome             text        NOT NULL,
    error_class         text        NOT NULL,
    error               text        NOT NULL DEFAULT '',
    -- [[name, value], ...] as the engine kept them (no set-cookie values)
    response_headers    jsonb       NOT NULL DEFAULT '[]',
    response_body       bytea,
    response_truncated  boolean     NOT NULL DEFAULT false,
    -- delivered, retry, dead_lettered ('' for records older than the field)
    next                text        NOT NULL,
    next_due_at         timestamptz,
    next_tier           text,
    PRIMARY KEY (started_at, event_id, endpoint_id, attempt)
) PARTITION BY RANGE (started_at);

CREATE INDEX attempts_event ON hookstream.attempts (event_id);
CREATE INDEX attempts_endpoint ON hookstream.attempts (endpoint_id, started_at);
CREATE INDEX attempts_tenant ON hookstream.attempts (tenant_id, started_at);

-- The partition of one UTC day, created if missing. Serialised by an advisory lock: sinks
-- in several dispatchers may ask for the same day at once.
CREATE FUNCTION hookstream.ensure_attempt_partition(day date) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    name text := 'attempts_' || to_char(day, 'YYYYMMDD');
    low timestamptz := day::timestamp AT TIME ZONE 'UTC';
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('hookstream.attempts partitions'));
    IF to_regclass('hookstream.' || name) IS NULL THEN
        EXECUTE format(
            'CREATE TABLE hookstream.%I PARTITION OF hookstream.attempts FOR VALUES FROM (%L) TO (%L)',
            name, low, low + interval '1 day');
    END IF;
END $$;

-- Drops the day partitions before `before` (UTC); returns their names.
CREATE FUNCTION hookstream.drop_attempt_partitions(before date) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    part text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('hookstream.attempts partitions'));
    FOR part IN
        SELECT c.relname
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        JOIN pg_namespace n ON n.oid = p.relnamespace
        WHERE n.nspname = 'hookstream' AND p.relname = 'attempts'
          AND c.relname ~ '^attempts_[0-9]{8}$'
          AND to_date(substr(c.relname, 10), 'YYYYMMDD') < before
        ORDER BY c.relname
    LOOP
        EXECUTE format('DROP TABLE hookstream.%I', part);
        RETURN NEXT part;
    END LOOP;
END $$;

-- Per endpoint, per minute and per hour: how many attempts, how many delivered, a latency
-- histogram and the failures by class and status. The attempt sink adds to these rows in the
-- transaction that stores the attempts themselves (only attempts stored for the first time
-- count), so they always agree with hookstream.attempts. Statistics over a window read the
-- hours the window covers and the minutes at its edges: a handful of rows per endpoint, not
-- every attempt (percentile_cont over raw rows took seconds at a few hundred thousand
-- attempts and timed out at ten million).
--
-- Latency buckets: bucket b holds durations d (ms) with floor(8 * log2(1 + d)) = b, eight
-- buckets per doubling (about ±4.5 % around a bucket's middle). Only buckets with attempts
-- are kept: `bucket` lists them in ascending order, `bucket_n` their counts.
CREATE TABLE hookstream.attempt_stats (
    start_at         timestamptz NOT NULL,
    endpoint_id      uuid        NOT NULL,
    span             text        NOT NULL CHECK (span IN ('minute', 'hour')),
    tenant_id        uuid        NOT NULL,
    attempts         integer     NOT NULL,
    delivered        integer     NOT NULL,
    duration_ms_sum  bigint      NOT NULL,
    bucket           smallint[]  NOT NULL,
    bucket_n         integer[]   NOT NULL,
    -- error class -> attempts not delivered
    failures         jsonb       NOT NULL DEFAULT '{}',
    -- status (non-2xx) -> attempts
    statuses         jsonb       NOT NULL DEFAULT '{}',
    PRIMARY KEY (start_at, endpoint_id, span)
) PARTITION BY RANGE (start_at);

CREATE INDEX attempt_stats_span ON hookstream.attempt_stats (span, start_at);
CREATE INDEX attempt_stats_endpoint ON hookstream.attempt_stats (endpoint_id, span, start_at);
CREATE INDEX attempt_stats_tenant ON hookstream.attempt_stats (tenant_id, span, start_at);

-- Two sparse histograms added bucket by bucket.
CREATE FUNCTION hookstream.add_buckets(a smallint[], a_n integer[], b smallint[], b_n integer[],
                                       OUT bucket smallint[], OUT bucket_n integer[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(k ORDER BY k), '{}'), coalesce(array_agg(n ORDER BY k), '{}')
    FROM (SELECT k, sum(n)::integer AS n
          FROM (SELECT * FROM unnest(a, a_n) AS x(k, n)
                UNION ALL
                SELECT * FROM unnest(b, b_n) AS y(k, n)) AS both_sides
          GROUP BY k) AS summed
$$;

-- Two {label: count} objects added label by label.
CREATE FUNCTION hookstream.add_counts(a jsonb, b jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_object_agg(k, n), '{}')
    FROM (SELECT k, sum(v::integer) AS n
          FROM (SELECT * FROM jsonb_each_text(a) UNION ALL SELECT * FROM jsonb_each_text(b)) AS x(k, v)
          GROUP BY k) AS summed
$$;

-- Day partitions of the attempts and of their statistics are made and dropped together.
CREATE OR REPLACE FUNCTION hookstream.ensure_attempt_partition(day date) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    suffix text := to_char(day, 'YYYYMMDD');
    low timestamptz := day::timestamp AT TIME ZONE 'UTC';
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('hookstream.attempts partitions'));
    IF to_regclass('hookstream.attempts_' || suffix) IS NULL THEN
        EXECUTE format(
            'CREATE TABLE hookstream.%I PARTITION OF hookstream.attempts FOR VALUES FROM (%L) TO (%L)',
            'attempts_' || suffix, low, low + interval '1 day');
    END IF;
    IF to_regclass('hookstream.attempt_stats_' || suffix) IS NULL THEN
        EXECUTE format(
            'CREATE TABLE hookstream.%I PARTITION OF hookstream.attempt_stats FOR VALUES FROM (%L) TO (%L)',
            'attempt_stats_' || suffix, low, low + interval '1 day');
    END IF;
END $$;

CREATE OR REPLACE FUNCTION hookstream.drop_attempt_partitions(before date) RETURNS SETOF text
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
        EXECUTE format('DROP TABLE IF EXISTS hookstream.%I', 'attempt_stats_' || substr(part, 10));
        RETURN NEXT part;
    END LOOP;
END $$;

-- Recomputes every statistics row from the stored attempts (the attempts stored before this
-- migration; or an operator's repair). It locks both tables: run it when the sink is stopped.
CREATE FUNCTION hookstream.rebuild_attempt_stats() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    part text;
    made bigint;
BEGIN
    LOCK TABLE hookstream.attempts, hookstream.attempt_stats IN SHARE ROW EXCLUSIVE MODE;
    FOR part IN
        SELECT c.relname FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        JOIN pg_namespace n ON n.oid = p.relnamespace
        WHERE n.nspname = 'hookstream' AND p.relname = 'attempts' AND c.relname ~ '^attempts_[0-9]{8}$'
    LOOP
        PERFORM hookstream.ensure_attempt_partition(to_date(substr(part, 10), 'YYYYMMDD'));
    END LOOP;
    DELETE FROM hookstream.attempt_stats;
    CREATE TEMP TABLE attempt_stats_keyed ON COMMIT DROP AS
        SELECT date_trunc(sp.span, a.started_at) AS start_at, a.endpoint_id, sp.span, a.tenant_id,
               a.duration_ms, a.outcome, a.error_class, a.status
        FROM hookstream.attempts a CROSS JOIN (VALUES ('minute'), ('hour')) AS sp(span);
    INSERT INTO hookstream.attempt_stats
        (start_at, endpoint_id, span, tenant_id, attempts, delivered, duration_ms_sum, bucket, bucket_n,
         failures, statuses)
    SELECT s.start_at, s.endpoint_id, s.span, min(s.tenant_id::text)::uuid, sum(s.n)::integer,
           sum(s.delivered)::integer, sum(s.duration_ms_sum),
           array_agg(s.b ORDER BY s.b), array_agg(s.n ORDER BY s.b), '{}', '{}'
    FROM (SELECT start_at, endpoint_id, span, min(tenant_id::text)::uuid AS tenant_id,
                 floor(8 * log(2, 1 + greatest(duration_ms, 0)::numeric))::smallint AS b,
                 count(*) AS n, count(*) FILTER (WHERE outcome = 'delivered') AS delivered,
                 sum(greatest(duration_ms, 0)) AS duration_ms_sum
          FROM attempt_stats_keyed GROUP BY 1, 2, 3, 5) AS s
    GROUP BY s.start_at, s.endpoint_id, s.span;
    GET DIAGNOSTICS made = ROW_COUNT;
    UPDATE hookstream.attempt_stats s SET failures = f.counts
    FROM (SELECT start_at, endpoint_id, span, jsonb_object_agg(error_class, n) AS counts
          FROM (SELECT start_at, endpoint_id, span, error_class, count(*) AS n FROM attempt_stats_keyed
                WHERE outcome <> 'delivered' GROUP BY 1, 2, 3, 4) AS c
          GROUP BY 1, 2, 3) AS f
    WHERE s.start_at = f.start_at AND s.endpoint_id = f.endpoint_id AND s.span = f.span;
    UPDATE hookstream.attempt_stats s SET statuses = f.counts
    FROM (SELECT start_at, endpoint_id, span, jsonb_object_agg(status::text, n) AS counts
          FROM (SELECT start_at, endpoint_id, span, status, count(*) AS n FROM attempt_stats_keyed
                WHERE status IS NOT NULL AND status / 100 <> 2 GROUP BY 1, 2, 3, 4) AS c
          GROUP BY 1, 2, 3) AS f
    WHERE s.start_at = f.start_at AND s.endpoint_id = f.endpoint_id AND s.span = f.span;
    RETURN made;
END $$;

SELECT hookstream.rebuild_attempt_stats();

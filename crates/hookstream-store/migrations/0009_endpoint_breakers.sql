-- Circuit breakers live in each dispatcher's memory; this table is where dispatchers publish
-- the breakers that are not closed, so that `hookstream endpoint stats`, `hookstream health`
-- and the API can show them. One row per (endpoint, dispatcher); a closed breaker has no row.
-- Rows are re-reported every 30 s: readers trust only recent ones (a dispatcher that died
-- stops reporting and its rows age out). UNLOGGED: after a crash the table is empty until
-- the next report, which is at most 30 s away.
CREATE UNLOGGED TABLE hookstream.endpoint_breakers (
    endpoint_id  uuid        NOT NULL,
    member_id    uuid        NOT NULL,
    state        text        NOT NULL CHECK (state IN ('open', 'half_open')),
    -- When the breaker left the closed state.
    since        timestamptz NOT NULL,
    -- While open: when it lets a probe through.
    open_until   timestamptz,
    reported_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint_id, member_id)
);
CREATE INDEX endpoint_breakers_member_idx ON hookstream.endpoint_breakers (member_id);

-- Limits that hold for the whole dispatcher group, not per instance (autoscaling would
-- otherwise give an endpoint N times its rate limit and concurrency cap).
--
-- Rate: every dispatcher takes tokens for an endpoint from the same one-second window, kept
-- here; a window hands out at most the endpoint's rate, whichever dispatchers ask. Windows are
-- numbered by the database's clock, so dispatchers' clocks do not matter. UNLOGGED: after a
-- database crash the table is empty, which costs at most one window's worth of extra sends.
CREATE UNLOGGED TABLE hookstream.rate_windows (
    endpoint_id  uuid   NOT NULL,
    window_ms    bigint NOT NULL,   -- start of the window, ms since the epoch (database clock)
    used         integer NOT NULL,
    PRIMARY KEY (endpoint_id, window_ms)
);

-- Takes up to `want` tokens of the current window (of `window_len_ms`) for an endpoint whose
-- windows hold `cap` tokens each. Returns the tokens granted (0 when the window is used up)
-- and how many ms the window has left, so callers use them before it ends (their own clock
-- only measures the remaining interval).
CREATE FUNCTION hookstream.take_rate_tokens(ep uuid, want integer, cap integer, window_len_ms integer,
                                            OUT granted integer, OUT ms_left integer)
LANGUAGE plpgsql AS $$
DECLARE
    now_ms  bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    win     bigint := now_ms - now_ms % window_len_ms;
    cur     integer;
BEGIN
    INSERT INTO hookstream.rate_windows (endpoint_id, window_ms, used) VALUES (ep, win, 0)
        ON CONFLICT DO NOTHING;
    SELECT used INTO cur FROM hookstream.rate_windows
        WHERE endpoint_id = ep AND window_ms = win FOR UPDATE;
    granted := least(greatest(want, 0), greatest(cap - cur, 0));
    IF granted > 0 THEN
        UPDATE hookstream.rate_windows SET used = cur + granted
            WHERE endpoint_id = ep AND window_ms = win;
    END IF;
    ms_left := (win + window_len_ms - now_ms)::integer;
END;
$$;

-- Concurrency: each dispatcher process that delivers says it is alive every few seconds;
-- an endpoint's cap is shared among the live ones (each gets cap / live, at least 1).
CREATE UNLOGGED TABLE hookstream.dispatcher_members (
    member_id  uuid PRIMARY KEY,
    seen_at    timestamptz NOT NULL
);

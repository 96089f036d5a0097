-- The delivery log keeps what it needs to show an event without another copy of it: its type,
-- aggregate, payload size, and when it was committed and relayed. NULL for attempts stored
-- before these fields existed.
ALTER TABLE hookstream.attempts
    ADD COLUMN event_type    text,
    ADD COLUMN aggregate_id  text,
    ADD COLUMN payload_bytes integer,
    ADD COLUMN committed_at  timestamptz,
    ADD COLUMN relayed_at    timestamptz;

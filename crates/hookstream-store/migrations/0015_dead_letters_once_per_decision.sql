-- A dead letter now names the record whose handling made it (`handled_*`: the events record
-- on the first path, a retry tier's record on a retry). With the endpoint that is one
-- decision. A dispatcher that handles the same record again after a crash (killed after its
-- dead letter was acknowledged, before its offset was stored) produces the same dead letter
-- again at another DLQ position; the sink stores one row per decision, so `hookstream dlq`
-- neither counts nor replays it twice. Rows stored before have no handled record and are
-- left as they are (NULLs never conflict).

ALTER TABLE hookstream.dead_letters
    ADD COLUMN handled_topic     text,
    ADD COLUMN handled_partition integer,
    ADD COLUMN handled_offset    bigint;

-- Poison has no endpoint: the nil UUID stands in, so a poison record handled twice is one row.
CREATE UNIQUE INDEX dead_letters_decision_idx ON hookstream.dead_letters
    (handled_topic, handled_partition, handled_offset,
     coalesce(endpoint_id, '00000000-0000-0000-0000-000000000000'::uuid));

-- Dead letters: every record of the DLQ topic, stored by the dispatcher's DLQ sink so people
-- can query, inspect and replay them (`hookstream dlq ...`). The Kafka position of the DLQ
-- record is unique, so a record the sink sees twice (after a crash) is stored once.

CREATE TABLE hookstream.dead_letters (
    id                 bigserial PRIMARY KEY,
    -- NULL when the record did not name a valid one (undecodable bytes, a malformed id).
    tenant_id          uuid,
    endpoint_id        uuid,
    event_id           uuid,
    event_type         text NOT NULL DEFAULT '',
    reason             text NOT NULL,
    -- A small fixed set: http_4xx, http_5xx, timeout, connect, decode, unknown_tenant, ...
    error_class        text NOT NULL,
    -- HTTP status of the last attempt; 0 when there was no response.
    last_status        integer NOT NULL DEFAULT 0,
    attempts           integer NOT NULL DEFAULT 0,
    first_attempt_at   timestamptz,
    dead_at            timestamptz NOT NULL,
    stored_at          timestamptz NOT NULL DEFAULT now(),
    -- Where the DLQ record is (idempotency key of the sink).
    source_topic       text NOT NULL,
    source_partition   integer NOT NULL,
    source_offset      bigint NOT NULL,
    -- Where the event was read from originally (events topic or a retry tier).
    origin_topic       text,
    origin_partition   integer,
    origin_offset      bigint,
    -- The encoded EventEnvelope (protobuf), what a replay sends again; NULL for poison.
    event              bytea,
    -- The undecodable bytes, for poison records.
    raw                bytea,
    -- The start of the last response body.
    last_response      bytea,
    replayed_at        timestamptz,
    replay_count       integer NOT NULL DEFAULT 0,
    UNIQUE (source_topic, source_partition, source_offset)
);

CREATE INDEX dead_letters_tenant_dead_at_idx ON hookstream.dead_letters (tenant_id, dead_at);
CREATE INDEX dead_letters_endpoint_dead_at_idx ON hookstream.dead_letters (endpoint_id, dead_at);
CREATE INDEX dead_letters_class_dead_at_idx ON hookstream.dead_letters (error_class, dead_at);
CREATE INDEX dead_letters_dead_at_idx ON hookstream.dead_letters (dead_at);
CREATE INDEX dead_letters_event_idx ON hookstream.dead_letters (event_id);

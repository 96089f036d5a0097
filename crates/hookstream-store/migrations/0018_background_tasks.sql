-- Svix's background tasks: replays of what an endpoint missed (`endpoint.replay`), bulk replays
-- of what it was sent (`endpoint.bulk-replay`) and recoveries of its dead letters
-- (`endpoint.recover`). A task is a row, not a process: the API that takes it holds a lease,
-- renews it while it works and writes its progress (`cursor`, `sent`) as it goes; when an API
-- stops or dies the lease lapses and any API takes the task up again from its cursor. A task
-- ends `finished` (with its counts in `data`) or `failed` (with the reason in `data.error`).
CREATE TABLE hookstream.background_tasks (
    id           uuid        PRIMARY KEY,
    tenant_id    uuid        NOT NULL REFERENCES hookstream.tenants (id) ON DELETE CASCADE,
    -- The endpoint replayed to (a dead-letter replay of a whole application has none).
    endpoint_id  uuid,
    kind         text        NOT NULL
                 CHECK (kind IN ('endpoint.replay', 'endpoint.bulk-replay', 'endpoint.recover')),
    status       text        NOT NULL DEFAULT 'running'
                 CHECK (status IN ('running', 'finished', 'failed')),
    -- What the caller asked (window and filters), as the API validated it.
    params       jsonb       NOT NULL,
    -- The last message id handled (messages are walked in id order).
    cursor       uuid,
    -- Messages (or dead letters) sent so far.
    sent         bigint      NOT NULL DEFAULT 0,
    -- Messages looked at and left alone (already attempted, not subscribed, ...).
    skipped      bigint      NOT NULL DEFAULT 0,
    error        text,
    lease_owner  uuid,
    lease_until  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX background_tasks_tenant_idx ON hookstream.background_tasks (tenant_id, id);
CREATE INDEX background_tasks_running_idx ON hookstream.background_tasks (lease_until)
    WHERE status = 'running';

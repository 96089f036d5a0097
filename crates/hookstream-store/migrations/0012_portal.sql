-- The tenant portal (services/api/src/portal): single-use login links and browser sessions.
-- Only the SHA-256 of a link token or a session id is stored.

-- A link from `POST /api/v1/auth/app-portal-access/{app_id}`: short-lived, used once (the
-- login consumes it with one UPDATE … WHERE used_at IS NULL AND expires_at > now()).
CREATE TABLE hookstream.portal_links (
    hash        bytea PRIMARY KEY CHECK (length(hash) = 32),
    tenant_id   uuid NOT NULL REFERENCES hookstream.tenants(id) ON DELETE CASCADE,
    read_only   boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);
CREATE INDEX portal_links_expires ON hookstream.portal_links (expires_at);

-- A browser session started by a link; the cookie holds the id, the table its hash.
CREATE TABLE hookstream.portal_sessions (
    hash        bytea PRIMARY KEY CHECK (length(hash) = 32),
    tenant_id   uuid NOT NULL REFERENCES hookstream.tenants(id) ON DELETE CASCADE,
    read_only   boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX portal_sessions_expires ON hookstream.portal_sessions (expires_at);

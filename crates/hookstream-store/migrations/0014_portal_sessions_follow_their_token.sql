-- A portal link and the browser session it starts now belong to the app-portal token minted
-- with them (`POST /api/v1/auth/app-portal-access`): a session lives only while that token
-- does, so logging the token out (`POST /api/v1/auth/logout`), revoking it, or its expiry ends
-- the session at once. Before, a session outlived its token until its own expiry.
--
-- Links and sessions made before this migration belong to no token; they are ended (their
-- users open a new portal link) rather than left unrevocable.
DELETE FROM hookstream.portal_sessions;
DELETE FROM hookstream.portal_links;

ALTER TABLE hookstream.portal_links
    ADD COLUMN key_id uuid NOT NULL REFERENCES hookstream.api_keys(id) ON DELETE CASCADE;
ALTER TABLE hookstream.portal_sessions
    ADD COLUMN key_id uuid NOT NULL REFERENCES hookstream.api_keys(id) ON DELETE CASCADE;
CREATE INDEX portal_links_key ON hookstream.portal_links (key_id);
CREATE INDEX portal_sessions_key ON hookstream.portal_sessions (key_id);

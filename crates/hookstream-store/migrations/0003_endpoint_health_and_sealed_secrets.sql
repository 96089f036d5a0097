-- Endpoint health, for disabling endpoints that fail for too long, and endpoint secrets
-- encrypted at rest.

-- Set at the first failed delivery after a success (or ever), cleared by the next success.
-- An endpoint failing with no success for longer than the dispatcher's window is disabled.
ALTER TABLE hookstream.endpoints ADD COLUMN failing_since timestamptz;

-- Secrets are sealed with AES-256-GCM under a key from the services' configuration
-- (`[secrets]`): `sealed` is nonce (12 bytes) || ciphertext || tag, the endpoint id is the
-- associated data (a sealed secret moved to another endpoint does not open), and `key_id`
-- names the key, so keys can be rotated. Rows written before this migration keep their
-- plaintext in `secret` and are still read; `hookstream secrets seal` rewrites them sealed.
ALTER TABLE hookstream.endpoint_secrets
    ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN sealed bytea,
    ADD COLUMN key_id text,
    ADD CONSTRAINT endpoint_secrets_stored
        CHECK ((secret IS NOT NULL) OR (sealed IS NOT NULL AND key_id IS NOT NULL));

-- An app-portal token (`hsp_`) now records the tenant key (`hsk_`) that minted it: revoking
-- that key revokes the tokens it minted, and so (migration 0014) every portal session and
-- unopened login link of theirs. Before, a token outlived the key that made it until its own
-- expiry. Tokens minted by an operator, or before this migration, have no minting key.
ALTER TABLE hookstream.api_keys
    ADD COLUMN minted_by uuid REFERENCES hookstream.api_keys(id) ON DELETE CASCADE;
CREATE INDEX api_keys_minted_by ON hookstream.api_keys (minted_by) WHERE minted_by IS NOT NULL;

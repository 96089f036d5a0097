-- The API's message creates, set-based. `messages::enqueue_many` used to call
-- `hookstream.enqueue_message` once per row (PL/pgSQL: a dozen statements per message), which
-- was about three quarters of PostgreSQL's time under the API benchmark. It now writes a
-- whole group with one statement (the checks, the idempotency keys, the outbox rows and the
-- message rows), which needs only this: a refusal raised from inside a query, with
-- `hookstream.enqueue`'s SQLSTATE and message. The checks are now written twice, in
-- `hookstream.enqueue` (migration 0010) and in that statement: change both together.
CREATE FUNCTION hookstream.refuse(p_code text, p_message text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message;
END $$;

DROP FUNCTION hookstream.enqueue_message(uuid, text, jsonb, text, text, jsonb, text, text);

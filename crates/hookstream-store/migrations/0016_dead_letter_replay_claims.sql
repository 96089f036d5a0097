-- A replay claims the dead letters it is about to send (those due in the next minute) until
-- the last of them is due, plus a margin. Another replay running at the same time skips what
-- is claimed (and reports it) instead of sending it a second time; a replay that dies leaves
-- claims that simply expire. Marking a dead letter replayed, or the replay ending, clears its
-- claim.
ALTER TABLE hookstream.dead_letters
    ADD COLUMN replay_claim         uuid,
    ADD COLUMN replay_claimed_until timestamptz;

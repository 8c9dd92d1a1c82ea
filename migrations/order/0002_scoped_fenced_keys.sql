-- Idempotency keys scoped to the customer, and fenced by their holder's
-- lock token (SPEC §3). Portable SQL: SQLite cannot change a primary key in
-- place, so the table is rebuilt (on both databases alike) and renamed.
--
-- Keys are short-lived (24 h): rows that already have an order keep it,
-- scoped to that order's customer; rows still at `started` (a request that
-- crashed before creating anything) are dropped, which is what a retry
-- would have found anyway: nothing done, start afresh.
CREATE TABLE idempotency_keys_scoped (
    customer_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    -- order_created | finished (`started` is no longer written: the key
    -- commits together with its order)
    recovery_point TEXT NOT NULL,
    locked_until BIGINT NOT NULL,
    -- Who holds the key: every write after the claim checks it, so a holder
    -- that stalled past its lock and was taken over writes nothing more.
    lock_token TEXT NOT NULL,
    order_id TEXT,
    response_status BIGINT,
    -- JSON list of [name, value] pairs.
    response_headers TEXT,
    response_body TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (customer_id, idempotency_key)
);

INSERT INTO idempotency_keys_scoped
    (customer_id, idempotency_key, fingerprint, recovery_point, locked_until, lock_token,
     order_id, response_status, response_headers, response_body, created_at)
SELECT o.customer_id, k.idempotency_key, k.fingerprint, k.recovery_point, k.locked_until, '',
       k.order_id, k.response_status, k.response_headers, k.response_body, k.created_at
FROM idempotency_keys k JOIN orders o ON o.id = k.order_id;

DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_scoped RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

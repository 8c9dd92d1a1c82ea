-- The order service's database (SPEC §1, §3, §5). Portable SQL: it runs on
-- Postgres and SQLite alike. Ids are UUIDs as TEXT; times are Unix
-- milliseconds (BIGINT).

-- One row per order; `status` is pending | confirmed | rejected | cancelled.
CREATE TABLE orders (
    id TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL,
    status TEXT NOT NULL,
    total_cents BIGINT NOT NULL,
    -- JSON list of the short products when the order was rejected.
    reject_reason TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX orders_by_customer ON orders (customer_id, created_at);

-- The lines of an order, with the unit price when it was placed.
CREATE TABLE order_lines (
    order_id TEXT NOT NULL REFERENCES orders (id),
    line_no BIGINT NOT NULL,
    product_id TEXT NOT NULL,
    quantity BIGINT NOT NULL,
    unit_price_cents BIGINT NOT NULL,
    PRIMARY KEY (order_id, line_no)
);

-- Idempotency keys of POST /api/orders (Stripe's "atomic phases"): the row
-- is inserted first and locked by its request (`locked_until`); the
-- recovery point says how far the request got, so a retry after a crash
-- resumes instead of starting over; the finished response is replayed byte
-- for byte.
CREATE TABLE idempotency_keys (
    idempotency_key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    -- started | order_created | finished
    recovery_point TEXT NOT NULL,
    locked_until BIGINT NOT NULL,
    order_id TEXT,
    response_status BIGINT,
    -- JSON list of [name, value] pairs.
    response_headers TEXT,
    response_body TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

-- Transactional outbox: work to do at Inventory for an order, written in
-- the same transaction as the order change. `kind` is reserve | release.
-- A claimer holds a row until `locked_until`; a crashed claimer's rows are
-- taken over after that. Reservation id = order id, so doing a row twice
-- has no further effect. `token` changes whenever the row is enqueued
-- again, so finishing an older copy of the work never deletes newer work.
CREATE TABLE outbox (
    order_id TEXT NOT NULL REFERENCES orders (id),
    kind TEXT NOT NULL,
    token TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    locked_until BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (order_id, kind)
);
CREATE INDEX outbox_due ON outbox (next_attempt_at);

-- Inventory: stock per product and the reservations taken from it.
--
-- Conservation: for every product,
--   initial (last SetStock) = stock.available
--                             + Σ reservation_lines.quantity of its reservations in state 'reserved'.
-- A reservation row is also the idempotency key of ReserveStock/ReleaseStock:
-- its primary key makes concurrent repeats of one reservation_id race-free.

CREATE TABLE stock (
    product_id TEXT PRIMARY KEY,
    available BIGINT NOT NULL CHECK (available >= 0),
    updated_at BIGINT NOT NULL
);

-- state 'released' with no lines is a tombstone: a release that arrived
-- before (or instead of) its reservation, so a late reservation is refused.
CREATE TABLE reservations (
    reservation_id TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'released')),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE reservation_lines (
    reservation_id TEXT NOT NULL REFERENCES reservations (reservation_id),
    line_no BIGINT NOT NULL,
    product_id TEXT NOT NULL,
    quantity BIGINT NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (reservation_id, line_no)
);

CREATE INDEX reservation_lines_product ON reservation_lines (product_id);

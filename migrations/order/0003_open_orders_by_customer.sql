-- The open-order limit (`orders.max_open_per_customer`, issue 15) counts a
-- customer's `pending` orders before each placement. A partial index holds
-- only the open orders, so the count reads at most the limit's worth of
-- index entries however many orders the customer has ever placed, and the
-- index stays small (orders leave it when confirmed, rejected or
-- cancelled). Partial indexes are portable: SQLite ≥ 3.8 and Postgres.
CREATE INDEX orders_pending_by_customer ON orders (customer_id) WHERE status = 'pending';

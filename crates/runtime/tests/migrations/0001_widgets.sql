CREATE TABLE widgets (
    id TEXT PRIMARY KEY,
    quantity BIGINT NOT NULL CHECK (quantity >= 0)
);

#!/usr/bin/env python3
"""WAL pages that SQLite writes per order, by how many orders share a commit.

The embedded system's order database has one writer (SQLite), and in the
overload sweep it is the bound (`shopeasy_db_writer_hold_duration_seconds`).
Each commit appends every page it dirtied to the WAL as a whole 4 KiB frame,
and commit (a) touches twelve B-trees (orders and its three indexes, the
lines and their key, the idempotency key, its key and age index, the outbox,
its key and due index). This script replays the order's two commits — (a)
key + order + one line + outbox row, (c) confirm + drop the outbox row +
store the response — on the project's own migrations, with `n` orders per
transaction, and counts the WAL frames they add. Frames are what the writer
thread writes (two `pwrite` calls each), so the count is a deterministic
proxy of its work, unlike the hold's wall time on a noisy machine.

    python3 bench/sqlite-pages.py            # batches 1, 5, 10, 20
    python3 bench/sqlite-pages.py 1 50       # chosen batches

Standard library only (Python's sqlite3). Figures in the order README.
"""
import os
import random
import sqlite3
import sys
import tempfile
import uuid

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MIGRATIONS = os.path.join(ROOT, "migrations", "order")
FRAME = 4096 + 24  # page + WAL frame header


def connect(path):
    c = sqlite3.connect(path, isolation_level=None)
    # The pragmas the runtime sets on every SQLite connection.
    c.execute("PRAGMA journal_mode = WAL")
    c.execute("PRAGMA synchronous = NORMAL")
    c.execute("PRAGMA foreign_keys = ON")
    for name in sorted(os.listdir(MIGRATIONS)):
        c.executescript(open(os.path.join(MIGRATIONS, name)).read())
    return c


class Orders:
    """Orders with time-ordered ids (as `Uuid::now_v7`) spread over 1,000
    customers, as `shopeasy load` places them."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.now = 1_700_000_000_000

    def next(self):
        self.now += 1
        bits = self.rng.getrandbits(74)
        oid = uuid.UUID(int=(self.now << 80) | (0x7 << 76) | ((bits >> 62) << 64)
                        | (0b10 << 62) | (bits & ((1 << 62) - 1)))
        return str(oid), f"load-{self.rng.randrange(1000)}", self.now

    def key(self):
        return str(uuid.UUID(int=self.rng.getrandbits(128)))


def create(c, gen, oid, customer, now):
    c.execute(
        "INSERT INTO idempotency_keys (customer_id, idempotency_key, fingerprint, "
        "recovery_point, locked_until, lock_token, order_id, created_at) "
        "VALUES (?, ?, ?, 'order_created', ?, ?, ?, ?)",
        (customer, gen.key(), "f" * 64, now + 60_000, gen.key(), oid, now))
    c.execute(
        "INSERT INTO orders (id, customer_id, status, total_cents, created_at, updated_at) "
        "VALUES (?, ?, 'pending', 1200, ?, ?)", (oid, customer, now, now))
    c.execute("INSERT INTO order_lines VALUES (?, 0, ?, 1, 1200)", (oid, gen.key()))
    c.execute("INSERT INTO outbox VALUES (?, 'reserve', ?, 0, ?, ?, ?)",
              (oid, gen.key(), now, now + 5_000, now))


def finish(c, oid, customer, now):
    c.execute("UPDATE orders SET status = 'confirmed', updated_at = ? "
              "WHERE id = ? AND status = 'pending'", (now, oid))
    c.execute("DELETE FROM outbox WHERE order_id = ? AND kind = 'reserve'", (oid,))
    c.execute("UPDATE idempotency_keys SET recovery_point = 'finished', locked_until = 0, "
              "response_status = 201, response_headers = '[]', response_body = ? "
              "WHERE customer_id = ? AND order_id = ?", ("x" * 450, customer, oid))


def frames(path):
    wal = path + "-wal"
    return os.path.getsize(wal) / FRAME if os.path.exists(wal) else 0.0


def pages_per_order(batch, orders=2_000, history=20_000):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "order.db")
        c = connect(path)
        gen = Orders(seed=1)
        # A history, so the B-trees have the depth of a busy shop's.
        c.execute("BEGIN")
        for _ in range(history):
            oid, customer, now = gen.next()
            create(c, gen, oid, customer, now)
            finish(c, oid, customer, now)
        c.execute("COMMIT")
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        c.execute("PRAGMA wal_autocheckpoint = 0")  # count every frame
        before = frames(path)
        for _ in range(0, orders, batch):
            placed = [gen.next() for _ in range(batch)]
            c.execute("BEGIN IMMEDIATE")  # commit (a) of `batch` orders
            for oid, customer, now in placed:
                create(c, gen, oid, customer, now)
            c.execute("COMMIT")
            c.execute("BEGIN IMMEDIATE")  # commit (c) of the same orders
            for oid, customer, now in placed:
                finish(c, oid, customer, now)
            c.execute("COMMIT")
        return (frames(path) - before) / orders


if __name__ == "__main__":
    batches = [int(a) for a in sys.argv[1:]] or [1, 5, 10, 20]
    base = None
    for b in batches:
        p = pages_per_order(b)
        base = base or p
        print(f"{b:3d} orders per commit: {p:5.2f} WAL pages per order "
              f"({p / base:.2f} of the first)")

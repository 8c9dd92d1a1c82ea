#!/usr/bin/env bash
# Order service benchmarks (issues 6 and 19), printed as Markdown tables:
#
# - placement: keyed and unkeyed orders/s, p50/p99 at 8, 32 and 128 closed-loop
#   clients (BENCH_CLIENTS), end to end on Postgres with the real Inventory,
#   next to `pgbench -N -M prepared` at the same client count in the same run,
#   in turns (BENCH_SLICES slices of each, alternating, so that a noisy
#   machine's drift hits both alike; pgbench capped below the server's
#   max_connections less the bench's pools, and said so), the ratio, the
#   commits per order counted by pg_stat_database.xact_commit over the order
#   and inventory databases (and the order database's share), the rows
#   written per order and table (pg_stat_user_tables), the backends' states
#   sampled every 20 ms, BENCH_SAMPLE_MS (pg_stat_activity: idle, on the CPU, or waiting on
#   the WAL, a lock or the client), the machine's busy CPU per pgbench
#   transaction and per order (/proc/stat) and, when the server loads it, the
#   statements per order (pg_stat_statements);
# - stampede: 1,000 concurrent orders, one expired cache entry → GetStock calls;
# - breaker_open_stale: POST latency while Inventory's breaker is open.
#
#   SHOPEASY_TEST_POSTGRES=postgres://postgres@127.0.0.1:5432/postgres bench/order.sh
#   BENCH_SECONDS=30 BENCH_CLIENTS=32 bench/order.sh placement
#
# Needs `pgbench` on PATH. Everything runs in one process on one machine
# (clients, order service, Inventory, the Product stub) beside Postgres: the
# figures are for comparing with pgbench in the same run, not absolute.
# Every database it creates is dropped afterwards.
set -euo pipefail
: "${SHOPEASY_TEST_POSTGRES:?set SHOPEASY_TEST_POSTGRES to a Postgres the bench may create databases on}"
command -v pgbench >/dev/null || { echo "bench/order.sh: pgbench is not on PATH" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
exec cargo bench -p shopeasy-order --bench order -- "$@"

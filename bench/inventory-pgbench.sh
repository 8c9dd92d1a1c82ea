#!/usr/bin/env bash
# Baseline for the Inventory ReserveStock benchmark: `pgbench -N` (TPC-B-like
# without the contended branch/teller updates) on a scratch database of the
# same Postgres server, with the same number of concurrent clients as the
# criterion benchmark (crates/inventory/benches/reserve.rs, 32 in flight).
#
# Usage: bench/inventory-pgbench.sh [postgres-url]   (default: $SHOPEASY_TEST_POSTGRES)
set -euo pipefail

url="${1:-${SHOPEASY_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/postgres}}"
db="shopeasy_pgbench_$$"
scratch="${url%/*}/$db"
clients="${CLIENTS:-32}"
seconds="${SECONDS_TO_RUN:-15}"

psql "$url" -qc "CREATE DATABASE $db"
trap 'psql "$url" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)"' EXIT

pgbench -q -i -s 10 "$scratch" >/dev/null 2>&1
pgbench -N -M prepared -c "$clients" -j 2 -T "$seconds" "$scratch"

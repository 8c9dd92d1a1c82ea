#!/usr/bin/env bash
# Order service benchmarks (issue 6): placement throughput end to end on
# Postgres (with the real Inventory service), the stock-cache stampede
# (1,000 concurrent orders, one expired entry → GetStock calls), and POST
# latency while Inventory's breaker is open and a stale entry answers.
#
#   SHOPEASY_TEST_POSTGRES=postgres://postgres@127.0.0.1:5432/postgres bench/order.sh
#   BENCH_SECONDS=30 BENCH_CONCURRENCY=64 BENCH_REQUESTS=5000 bench/order.sh
#
# Prints a Markdown table. Every database it creates is dropped afterwards.
set -euo pipefail
: "${SHOPEASY_TEST_POSTGRES:?set SHOPEASY_TEST_POSTGRES to a Postgres the bench may create databases on}"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
exec cargo bench -p shopeasy-order --bench order

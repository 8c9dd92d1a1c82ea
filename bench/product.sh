#!/usr/bin/env bash
# Benchmark of GET /api/products/{id}: cached (read cache on) versus uncached
# (CACHE__ENABLED=false, every request reads the database).
#
# Needs wrk (`apt-get install -y wrk`). Uses the release binary.
#
#   DATABASE_URL  the catalogue database (default: a fresh Postgres database on
#                 $SHOPEASY_TEST_POSTGRES when set, else a SQLite file)
#   REDIS_URL     Redis for the cache (default redis://127.0.0.1:6379; empty =
#                 the in-process cache)
#   DURATION      wrk duration per run (default 15s)
#   CONNECTIONS   concurrent connections (default 32)
#   ROUNDS        alternating cached/uncached runs (default 3)
#
# Prints one line per run: requests/s and p50/p99 latency.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
REDIS_URL=${REDIS_URL-redis://127.0.0.1:6379}
TOKEN=bench-token
WORK=$(mktemp -d)
PIDS=()
DROP_DB=""

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -n "$DROP_DB" ]]; then psql -q "$SHOPEASY_TEST_POSTGRES" -c "DROP DATABASE IF EXISTS $DROP_DB WITH (FORCE)" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)" >&2; exit 1; }

if [[ -z "${DATABASE_URL:-}" ]]; then
  if [[ -n "${SHOPEASY_TEST_POSTGRES:-}" ]]; then
    DROP_DB="shopeasy_bench_product_$$"
    psql -q "$SHOPEASY_TEST_POSTGRES" -c "CREATE DATABASE $DROP_DB"
    DATABASE_URL="${SHOPEASY_TEST_POSTGRES%/*}/$DROP_DB"
  else
    DATABASE_URL="sqlite:$WORK/product.db"
  fi
fi

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p shopeasy-product
BIN="$CARGO_TARGET_DIR/release/shopeasy-product"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start MODE CACHE_ENABLED -> prints the base URL
start() {
  local port admin
  port=$(free_port); admin=$(free_port)
  LISTEN_ADDR=127.0.0.1:$port ADMIN_ADDR=127.0.0.1:$admin DATABASE_URL=$DATABASE_URL \
    REDIS_URL=$REDIS_URL ADMIN_TOKEN=$TOKEN CACHE__ENABLED=$2 \
    CACHE__KEY_PREFIX="bench:$$:$1:" LOG__LEVEL=warn LOG__FORMAT=text \
    "$BIN" >"$WORK/$1.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$admin/health/ready" >/dev/null 2>&1 && { echo "http://127.0.0.1:$port"; return; }
    sleep 0.1
  done
  echo "shopeasy-product ($1) did not become ready:" >&2; cat "$WORK/$1.log" >&2; exit 1
}

CACHED=$(start cached true)
UNCACHED=$(start uncached false)

ID=$(curl -fs -X POST "$CACHED/api/products" -H "Authorization: Bearer $TOKEN" \
  -H 'Content-Type: application/json' \
  -d '{"sku":"BENCH-1","name":"Benchmark tea","description":"A product to read again and again","price_cents":450,"currency":"EUR"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')

echo "database: ${DATABASE_URL%%:*}, cache: ${REDIS_URL:-in-process}, $CONNECTIONS connections, $THREADS threads, $ROUNDS x $DURATION per mode"
for url in "$CACHED" "$UNCACHED"; do curl -fs "$url/api/products/$ID" >/dev/null; done  # warm the cache / the pool
# Modes alternate, so a burst of load from elsewhere on the machine hits both.
for round in $(seq 1 "$ROUNDS"); do
  for mode in cached uncached; do
    url=$([[ $mode == cached ]] && echo "$CACHED" || echo "$UNCACHED")
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$url/api/products/$ID")
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    errors=$(grep -E "Non-2xx|Socket errors" <<<"$out" || true)
    printf 'round %s  %-9s %10s req/s   p50 %8s   p99 %8s  %s\n' "$round" "$mode" "$rps" "$p50" "$p99" "$errors"
  done
done

#!/usr/bin/env bash
# The overload curve (issue 14, point 7) on the embedded system: starts
# `shopeasy` (release, SQLite in a scratch folder, its own admin token), runs
# `shopeasy load --sweep` against its gateway — capacity search, then 0.5×,
# 1×, 2×, 3× and 5× of it open-loop, restocking through Inventory's SetStock
# before each step so every order is a real placement — and leaves the CSV
# and the SVG plot under bench/results/ (overload.csv, overload.svg).
#
#   bench/overload.sh                                  # defaults
#   bench/overload.sh --capacity 800 --step-seconds 30 # skip the search
#   SHOPEASY_BIN=target/release/shopeasy bench/overload.sh --name overload-run2
#   SYSTEM_CPUS=0 LOAD_CPUS=1 bench/overload.sh         # one core each
#
# Extra arguments go to `shopeasy load --sweep` (see `shopeasy load --help`).
# Both the system and the generator run on this machine and share its cores
# (unless SYSTEM_CPUS / LOAD_CPUS give each its own, below; the table shows
# the cores each kept busy): the figures compare steps of one run, they are
# not absolute. Needs curl (and taskset to pin).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${SHOPEASY_BIN:-}
if [ -z "$bin" ]; then
    echo "building shopeasy (release)..." >&2
    cargo build --release -q -p shopeasy
    bin=${CARGO_TARGET_DIR:-$root/target}/release/shopeasy
fi
# The generator and the system may each hold thousands of connections.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

work=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

ADMIN_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export ADMIN_TOKEN
# All the load comes from one address: the gateway's per-client rate limit
# (1,000/s by default) would answer most of it 429 and hide the curve this
# script draws (admission control). Raised unless the caller sets it.
export LIMITS__CLIENT_REQUESTS_PER_SECOND=${LIMITS__CLIENT_REQUESTS_PER_SECOND:-1000000}
export LIMITS__CLIENT_BURST=${LIMITS__CLIENT_BURST:-1000000}
# The generator signs in 1,000 demo customers (`--customers`) and spreads the
# orders over them; at the rates of a sweep each would still pass the
# per-customer placement budget (120/min, burst 20) and, once Inventory
# slows, the open-orders cap (20 pending each): raised too, so the curve
# measures admission control and not those limits.
export LIMITS__CUSTOMER_ORDERS_PER_MINUTE=${LIMITS__CUSTOMER_ORDERS_PER_MINUTE:-10000000}
export LIMITS__CUSTOMER_ORDER_BURST=${LIMITS__CUSTOMER_ORDER_BURST:-10000000}
export ORDERS__MAX_OPEN_PER_CUSTOMER=${ORDERS__MAX_OPEN_PER_CUSTOMER:-10000}
# SYSTEM_CPUS / LOAD_CPUS (taskset lists, e.g. 0 and 1): the system and the
# generator on cores of their own, so a rising offered load does not take
# the CPU of the system it measures.
sys_pin=() load_pin=()
[ -z "${SYSTEM_CPUS:-}" ] || sys_pin=(taskset -c "$SYSTEM_CPUS")
[ -z "${LOAD_CPUS:-}" ] || load_pin=(taskset -c "$LOAD_CPUS")
LOG__LEVEL=${LOG__LEVEL:-warn} "${sys_pin[@]}" "$bin" --data-dir "$work/data" >"$work/system.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
    curl -fs -o /dev/null http://127.0.0.1:9080/health/ready && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/system.log" >&2; exit 1; }
    sleep 0.1
done
curl -fs -o /dev/null http://127.0.0.1:9080/health/ready || { echo "the system did not become ready" >&2; exit 1; }

mkdir -p bench/results
"${load_pin[@]}" "$bin" load --sweep --target http://127.0.0.1:8080 --inventory http://127.0.0.1:50051 \
    --pid "$pid" --metrics http://127.0.0.1:9080/metrics --out bench/results "$@"
if grep -q "Too many open files" "$work/system.log"; then
    echo "the system logged 'Too many open files'" >&2
    exit 1
fi

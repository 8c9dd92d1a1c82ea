#!/usr/bin/env bash
# The overload curve (issue 14, point 7) in full mode: the four service
# binaries and the demo issuer as separate processes (release), on Postgres
# ($SHOPEASY_TEST_POSTGRES: three scratch databases, dropped on exit) and
# Redis ($SHOPEASY_TEST_REDIS: key prefixes of this run's own), on loopback
# ports. Then, as bench/overload.sh does for the embedded system, runs
# `shopeasy load --sweep` against the gateway — capacity search, then 0.5×,
# 1×, 2×, 3× and 5× of it open-loop, restocking through Inventory's SetStock
# before each step — and leaves bench/results/overload-full.csv and .svg.
#
#   SHOPEASY_TEST_POSTGRES=postgres://postgres@127.0.0.1:5432/postgres \
#   SHOPEASY_TEST_REDIS=redis://127.0.0.1:6379 bench/overload-full.sh
#   bench/overload-full.sh --capacity 800 --step-seconds 30   # skip the search
#   SHOPEASY_BIN_DIR=target/release bench/overload-full.sh    # prebuilt binaries
#   SHOPEASY_PORT_BASE=31000 bench/overload-full.sh           # other ports
#   bench/overload-full.sh --name overload-full-run2 --out /some/where
#   GATEWAY_CPUS=0 LOAD_CPUS=0 SYSTEM_CPUS=1 bench/overload-full.sh  # cores apart
#
# Extra arguments go to `shopeasy load --sweep` (see `shopeasy load --help`).
# The descriptors and RSS in the table are the gateway's (it holds the
# clients' connections); every process's are printed at the end. All five
# processes, Postgres, Redis and the generator share this machine's cores:
# the figures compare steps of one run, they are not absolute. Needs curl
# and psql.
set -euo pipefail
: "${SHOPEASY_TEST_POSTGRES:?set SHOPEASY_TEST_POSTGRES to a Postgres the run may create databases on}"
: "${SHOPEASY_TEST_REDIS:?set SHOPEASY_TEST_REDIS}"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bins=${SHOPEASY_BIN_DIR:-}
if [ -z "$bins" ]; then
    echo "building the services and shopeasy (release)..." >&2
    cargo build --release -q -p shopeasy-gateway -p shopeasy-product -p shopeasy-order \
        -p shopeasy-inventory -p shopeasy-identity -p shopeasy
    bins=${CARGO_TARGET_DIR:-$root/target}/release
fi
# The generator and the gateway may each hold thousands of connections.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

work=$(mktemp -d)
run=bench$$_$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
pids=()
databases=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for db in "${databases[@]}"; do
        psql -q "$SHOPEASY_TEST_POSTGRES" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    done
    # This run's cache keys (they expire anyway; redis-cli is optional).
    if command -v redis-cli >/dev/null; then
        redis-cli -u "$SHOPEASY_TEST_REDIS" --scan --pattern "shopeasy:$run:*" 2>/dev/null |
            xargs -r redis-cli -u "$SHOPEASY_TEST_REDIS" del >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# A scratch database per service (`url_of` gives its URL: the server's
# URL with the database name replaced).
url_of() {
    local base=${SHOPEASY_TEST_POSTGRES%%\?*} query=
    [ "$base" != "$SHOPEASY_TEST_POSTGRES" ] && query="?${SHOPEASY_TEST_POSTGRES#*\?}"
    echo "${base%/*}/$1$query"
}
for service in product order inventory; do
    db="shopeasy_${run}_$service"
    psql -q "$SHOPEASY_TEST_POSTGRES" -c "CREATE DATABASE $db" >/dev/null
    databases+=("$db")
done
product_db=$(url_of "shopeasy_${run}_product")
order_db=$(url_of "shopeasy_${run}_order")
inventory_db=$(url_of "shopeasy_${run}_inventory")

# Loopback ports: public and admin listener of each process.
base=${SHOPEASY_PORT_BASE:-28000}
gateway=127.0.0.1:$((base + 80)) gateway_admin=127.0.0.1:$((base + 90))
product=127.0.0.1:$((base + 81)) product_admin=127.0.0.1:$((base + 91))
order=127.0.0.1:$((base + 82)) order_admin=127.0.0.1:$((base + 92))
inventory=127.0.0.1:$((base + 51)) inventory_admin=127.0.0.1:$((base + 93))
identity=127.0.0.1:$((base + 85)) identity_admin=127.0.0.1:$((base + 95))

ADMIN_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
SERVICE_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export ADMIN_TOKEN
# All the load comes from one address: the gateway's per-client rate limit
# (1,000/s by default) would answer most of it 429 and hide the curve this
# script draws (admission control). Raised unless the caller sets it; so are
# the per-customer placement budget (120/min, burst 20) and open-orders cap
# (20 pending each), as in bench/overload.sh.
client_rps=${LIMITS__CLIENT_REQUESTS_PER_SECOND:-1000000}
client_burst=${LIMITS__CLIENT_BURST:-1000000}
customer_rpm=${LIMITS__CUSTOMER_ORDERS_PER_MINUTE:-10000000}
customer_burst=${LIMITS__CUSTOMER_ORDER_BURST:-10000000}
max_open=${ORDERS__MAX_OPEN_PER_CUSTOMER:-10000}

# GATEWAY_CPUS / SYSTEM_CPUS / LOAD_CPUS (taskset lists): the gateway, the
# four processes behind it and the generator on cores of their own, as a
# deployment gives the edge nodes of its own. Postgres and Redis are this
# machine's: pin them by hand for such a run (`taskset -a -p -c 1 <pid>` for
# each of `pgrep postgres` and `pgrep redis-server`, then back to 0,1).
system_pin=() gateway_pin=() load_pin=()
[ -z "${SYSTEM_CPUS:-}" ] || system_pin=(taskset -c "$SYSTEM_CPUS")
[ -z "${GATEWAY_CPUS:-${SYSTEM_CPUS:-}}" ] || gateway_pin=(taskset -c "${GATEWAY_CPUS:-$SYSTEM_CPUS}")
[ -z "${LOAD_CPUS:-}" ] || load_pin=(taskset -c "$LOAD_CPUS")
pin=("${system_pin[@]}")

# Starts `$1` with a clean environment (as a deployment would: nothing of
# this shell leaks in) plus the given variables, the caller's ADMISSION__*
# (every service reads them) and LOG__LEVEL, on the cores `pin` names;
# waits for /health/ready on its admin listener `$2`.
start() {
    local name=$1 admin=$2
    shift 2
    local passed=()
    while IFS= read -r var; do passed+=("$var"); done < <(env | grep '^ADMISSION__' || true)
    env -i PATH="$PATH" LOG__LEVEL="${LOG__LEVEL:-warn}" ADMIN_ADDR="$admin" "${passed[@]}" "$@" \
        "${pin[@]}" "$bins/$name" >"$work/$name.log" 2>&1 &
    local pid=$!
    pids+=("$pid")
    for _ in $(seq 1 300); do
        curl -fs -o /dev/null "http://$admin/health/ready" && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$work/$name.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "$name did not become ready" >&2
    tail -20 "$work/$name.log" >&2
    exit 1
}

# The demo issuer: signs a token for any demo customer (POST /api/session
# through the gateway) and serves the JWKS gateway and order verify.
start shopeasy-identity "$identity_admin" LISTEN_ADDR="$identity" DATA_DIR="$work/identity"
jwks=http://$identity/.well-known/jwks.json
start shopeasy-inventory "$inventory_admin" LISTEN_ADDR="$inventory" \
    DATABASE_URL="$inventory_db" ADMIN_TOKEN="$ADMIN_TOKEN" SERVICE_TOKEN="$SERVICE_TOKEN" \
    DEMO_SEED=true
start shopeasy-product "$product_admin" LISTEN_ADDR="$product" \
    DATABASE_URL="$product_db" REDIS_URL="$SHOPEASY_TEST_REDIS" ADMIN_TOKEN="$ADMIN_TOKEN" \
    CACHE__KEY_PREFIX="shopeasy:$run:product:" DEMO_SEED=true
start shopeasy-order "$order_admin" LISTEN_ADDR="$order" \
    DATABASE_URL="$order_db" REDIS_URL="$SHOPEASY_TEST_REDIS" ADMIN_TOKEN="$ADMIN_TOKEN" \
    INVENTORY__SERVICE_TOKEN="$SERVICE_TOKEN" INVENTORY__URL="http://$inventory" \
    PRODUCT__URL="http://$product" AUTH__JWKS_URL="$jwks" \
    RESILIENCE__STOCK_CACHE__KEY_PREFIX="shopeasy:$run:order:" \
    ORDERS__MAX_OPEN_PER_CUSTOMER="$max_open"
pin=("${gateway_pin[@]}")
start shopeasy-gateway "$gateway_admin" LISTEN_ADDR="$gateway" \
    ROUTES__PRODUCT_URL="http://$product" ROUTES__ORDER_URL="http://$order" \
    ROUTES__IDENTITY_URL="http://$identity" AUTH__JWKS_URL="$jwks" \
    LIMITS__CLIENT_REQUESTS_PER_SECOND="$client_rps" LIMITS__CLIENT_BURST="$client_burst" \
    LIMITS__CUSTOMER_ORDERS_PER_MINUTE="$customer_rpm" LIMITS__CUSTOMER_ORDER_BURST="$customer_burst"
gateway_pid=${pids[-1]}
echo "five processes ready (gateway http://$gateway, inventory http://$inventory)" >&2

# bench/results/overload-full.*, unless the arguments say --out / --name.
defaults=()
case " $* " in *" --out"*) ;; *) mkdir -p bench/results; defaults+=(--out bench/results) ;; esac
case " $* " in *" --name"*) ;; *) defaults+=(--name overload-full) ;; esac
# The sweep prints issue 14's gates and fails when one does; the checks
# below run either way.
status=0
"${load_pin[@]}" "$bins/shopeasy" load --sweep --target "http://$gateway" --inventory "http://$inventory" \
    --pid "$gateway_pid" --metrics "http://$gateway_admin/metrics" "${defaults[@]}" "$@" || status=$?

# Each process's descriptors and RSS after the sweep.
names=(identity inventory product order gateway)
for i in "${!pids[@]}"; do
    p=${pids[$i]}
    fds=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo '?')
    echo "${names[$i]}: fds $fds rss ${rss} KiB" >&2
done
if grep -l "Too many open files" "$work"/*.log >&2; then
    echo "a process logged 'Too many open files'" >&2
    exit 1
fi
exit "$status"

#!/usr/bin/env bash
# Smoke test of the real compose stack: build the image, start the stack,
# wait for health, then over the gateway and the fault API walk the README's
# tour signed in (a demo token from the demo issuer through the gateway's
# POST /api/session, `Authorization: Bearer` on every order call; none →
# 401), kill Order during a burst of keyed orders, check the logs stay quiet
# without Jaeger, and take everything down again.
#
#   bash deploy/smoke.sh          # from a clone, with a container engine
#
# Prints one line per step and the total time. Whatever happens, the exit
# trap runs `down -v`: no container, network or volume is left behind (the
# last step checks). Jaeger and Grafana (profile `viewers`) are not started:
# they have no image on machines without a registry, and nothing needs them.
#
# Environment: GATEWAY_PORT (8080), FAULTS_API_PORT (8474) and CONSOLE_PORT (8090) as compose
# reads them; SMOKE_PROJECT (shopeasy-smoke) names the compose project, so a
# stack of your own is not touched; SMOKE_BURST (24) orders in the burst;
# SMOKE_BUILD=0 runs the image already built (`docker build -t shopeasy:local .`).
set -euo pipefail
cd "$(dirname "$0")/.."

# The legacy builder: BuildKit would fetch its frontend from a registry.
export DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}" COMPOSE_DOCKER_CLI_BUILD="${COMPOSE_DOCKER_CLI_BUILD:-0}"
project="${SMOKE_PROJECT:-shopeasy-smoke}"
gw="http://127.0.0.1:${GATEWAY_PORT:-8080}"
faults="http://127.0.0.1:${FAULTS_API_PORT:-8474}"
console="http://127.0.0.1:${CONSOLE_PORT:-8090}"
burst="${SMOKE_BURST:-24}"
# No SERVICE_TOKEN: the run proves the no-.env path, where compose's
# `secrets` service generates Order's credential at Inventory into a volume
# (orders are confirmed only when both read the same token).
unset SERVICE_TOKEN
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose -p "$project")
elif command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose -p "$project")
else
  echo "smoke: neither \`docker compose\` nor \`docker-compose\` is installed" >&2
  exit 1
fi

work=$(mktemp -d)
started=$(date +%s)
step_started=$started
current="start"
say() { echo "smoke: $*"; }
step() { current=$1; step_started=$(date +%s); }
ok() { say "$current: ok ($(($(date +%s) - step_started)) s)${1:+, $1}"; }
fail() { say "$current: FAILED: $*" >&2; exit 1; }

leftovers() {
  local label="label=com.docker.compose.project=$project"
  docker ps -aq --filter "$label"
  docker network ls -q --filter "$label"
  docker volume ls -q --filter "$label"
}
cleanup() {
  local status=$?
  if [ "$status" -ne 0 ]; then
    say "logs of the stack (last lines):" >&2
    "${compose[@]}" logs --no-color --tail 30 >&2 2>&1 || true
  fi
  "${compose[@]}" down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
  if [ -n "$(leftovers)" ]; then
    say "left behind after down -v: $(leftovers | tr '\n' ' ')" >&2
    status=1
  fi
  rm -rf "$work"
  say "total $(($(date +%s) - started)) s: $([ "$status" -eq 0 ] && echo passed || echo FAILED)"
  exit "$status"
}
trap cleanup EXIT

# JSON field $2 of the document in file $1 (python3: no jq needed).
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval("d"+sys.argv[2]))' "$1" "$2"; }

# Signs customer $1 in at the demo issuer through the gateway; prints the
# access token.
sign_in() {
  curl -sf -XPOST "$gw/api/session" -H 'content-type: application/json' \
    -d "{\"customer\":\"$1\"}" -o "$work/session-$1.json" || fail "POST /api/session for $1"
  [ "$(field "$work/session-$1.json" '["demo"]')" = True ] || fail "the session does not say demo"
  field "$work/session-$1.json" '["access_token"]'
}

# POST an order: key, product id, file for the body, token (default: the
# tour's customer); prints the status. The customer is the token's `sub`:
# the body carries none.
order() {
  local code
  code=$(curl -s -o "$3" -w '%{http_code}' -X POST "$gw/api/orders" \
    -H "authorization: Bearer ${4:-$token}" \
    -H 'content-type: application/json' -H "idempotency-key: $1" \
    -d "{\"items\":[{\"product_id\":\"$2\",\"quantity\":1}]}") || true
  echo "${code:-000}"
}

# GET a path of the gateway as the tour's customer.
get() { curl -sf -H "authorization: Bearer $token" "$gw$1" "${@:2}"; }

# Waits up to $1 s until every container of the project with a health check
# is healthy.
wait_healthy() {
  local deadline=$(($(date +%s) + $1)) ids status
  while :; do
    ids=$("${compose[@]}" ps -q)
    status=$(docker inspect -f '{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' $ids)
    if ! grep -qvE ' (healthy|none)$' <<<"$status"; then return 0; fi
    if [ "$(date +%s)" -ge "$deadline" ]; then fail "not healthy within $1 s: $(grep -vE ' (healthy|none)$' <<<"$status" | tr '\n' ' ')"; fi
    sleep 1
  done
}

# Polls order $1 until its status is $2 (at most $3 s).
wait_status() {
  local deadline=$(($(date +%s) + $3))
  until get "/api/orders/$1" -o "$work/poll.json" && [ "$(field "$work/poll.json" '["status"]')" = "$2" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "order $1 is not $2 within $3 s"
    sleep 0.5
  done
}

# --- 1. build ------------------------------------------------------------------
step build
if [ "${SMOKE_BUILD:-1}" = 1 ]; then
  "${compose[@]}" build >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; fail "image build failed"; }
fi
image="shopeasy:${SHOPEASY_TAG:-local}"
size=$(($(docker image inspect -f '{{.Size}}' "$image") / 1000000))
[ "$size" -le 120 ] || fail "the image is $size MB (at most 120 MB)"
ok "$image $size MB"

# --- 2. up and health -------------------------------------------------------------
step "up -d"
"${compose[@]}" up -d >"$work/up.log" 2>&1 || { tail -30 "$work/up.log" >&2; fail "compose up failed"; }
wait_healthy 180
ok "$("${compose[@]}" ps -q | wc -l | tr -d ' ') containers, every health check passing"

# --- 3. browse: the seeded demo catalogue --------------------------------------------
step browse
curl -sf "$gw/api/products?limit=100" -o "$work/products.json" || fail "GET /api/products"
count=$(field "$work/products.json" '["items"].__len__()')
[ "$count" = 12 ] || fail "expected the 12 demo products, got $count"
# Ids are UUIDv5 of the SKU (crates/product-api/src/demo.rs): same as embedded.
mug=$(python3 -c 'import json,sys; print([p["id"] for p in json.load(open(sys.argv[1]))["items"] if p["sku"]=="MUG-001"][0])' "$work/products.json")
[ "$mug" = 86fcd549-bb1b-50ff-add3-b7d9cbe6d0b4 ] || fail "MUG-001 has id $mug, not its SKU-derived id"
pen=$(python3 -c 'import json,sys; print([p["id"] for p in json.load(open(sys.argv[1]))["items"] if p["sku"]=="PEN-005"][0])' "$work/products.json")
ok "12 products, SKU-derived ids"

# --- 3b. the console: its page, four services and the fault API's four edges, read by name --------
step console
curl -sf "$console/" -o /dev/null || fail "GET $console/"
deadline=$(($(date +%s) + 30))
until curl -sf "$console/api/snapshot" -o "$work/console.json" \
  && [ "$(field "$work/console.json" '["services"].__len__()')" = 4 ] \
  && [ "$(field "$work/console.json" '["edges"].__len__()')" = 4 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "the console's snapshot has not 4 services and 4 edges: $(head -c 600 "$work/console.json" 2>/dev/null)"
  sleep 0.5
done
up=$(python3 -c 'import json,sys; print(sum(s["up"] for s in json.load(open(sys.argv[1]))["services"]))' "$work/console.json")
[ "$up" = 4 ] || fail "the console sees $up of 4 services up"
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'host: evil.example' "$console/api/snapshot")
[ "$code" = 403 ] || fail "the console answered a foreign Host with $code, not 403"
ok "GET / 200; 4 services up, 4 edges; a foreign Host 403"

# --- 4. sign in; without a token no order route answers -----------------------------------
step "sign in"
token=$(sign_in smoke)
[ "$(tr -cd . <<<"$token" | wc -c)" = 2 ] || fail "not a JWT: $token"
for call in "POST /api/orders" "GET /api/orders" "GET /api/orders/00000000-0000-0000-0000-000000000000"; do
  code=$(curl -s -o "$work/anon.json" -D "$work/anon.headers" -w '%{http_code}' -X "${call% *}" "$gw${call#* }" \
    -H 'content-type: application/json' -H "idempotency-key: smoke-anon-$(date +%s%N)" \
    -d "{\"items\":[{\"product_id\":\"$mug\",\"quantity\":1}]}")
  [ "$code" = 401 ] || fail "$call without a token got $code, not 401: $(cat "$work/anon.json")"
  grep -qi '^www-authenticate: Bearer' "$work/anon.headers" || fail "$call: 401 without WWW-Authenticate: Bearer"
done
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'authorization: Bearer not.a.token' "$gw/api/orders")
[ "$code" = 401 ] || fail "a malformed token got $code, not 401"
ok "a demo token for smoke; no token or a bad one → 401 + WWW-Authenticate"

# --- 5. order and replay ----------------------------------------------------------------
step "order"
key="smoke-$(date +%s%N)"
status=$(order "$key" "$mug" "$work/first.json")
[ "$status" = 201 ] || fail "expected 201, got $status: $(cat "$work/first.json")"
[ "$(field "$work/first.json" '["status"]')" = confirmed ] || fail "not confirmed: $(cat "$work/first.json")"
ok "201 confirmed"

step replay
status=$(order "$key" "$mug" "$work/replay.json")
[ "$status" = 201 ] || fail "replay answered $status"
cmp -s "$work/first.json" "$work/replay.json" || fail "the replay differs from the first answer"
ok "201, the same bytes"

# --- 6. break order-inventory, then heal ----------------------------------------------------
step "break order-inventory"
curl -sf -XPOST "$faults/proxies/order-inventory/toxics" -o /dev/null \
  -H 'content-type: application/json' \
  -d '{"name":"hang","type":"timeout","stream":"downstream","attributes":{"timeout":0}}' || fail "the fault API refused the toxic"
status=$(order "smoke-pending-$(date +%s%N)" "$mug" "$work/pending.json")
[ "$status" = 202 ] || fail "expected 202 pending, got $status: $(cat "$work/pending.json")"
pending=$(field "$work/pending.json" '["id"]')
[ "$(field "$work/pending.json" '["status"]')" = pending ] || fail "not pending"
ok "202 pending"

step heal
curl -sf -XDELETE "$faults/proxies/order-inventory/toxics/hang" -o /dev/null || fail "the fault API did not remove the toxic"
wait_status "$pending" confirmed 60
ok "the pending order confirmed"

step "fault API refuses what a web page could send"
curl -s "$faults/proxies" -o "$work/proxies-before.json" || fail "GET /proxies"
code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST "$faults/proxies/order-inventory/toxics" \
  -H 'host: evil.example' -H 'content-type: application/json' \
  -d '{"name":"x","type":"timeout","attributes":{"timeout":0}}')
[ "$code" = 403 ] || fail "a foreign Host got $code, not 403"
code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST "$faults/proxies/order-inventory/toxics" \
  -H 'content-type: text/plain' -d '{"name":"x","type":"timeout","attributes":{"timeout":0}}')
[ "$code" = 415 ] || fail "a text/plain body got $code, not 415"
curl -s "$faults/proxies" -o "$work/proxies-after.json" || fail "GET /proxies"
cmp -s "$work/proxies-before.json" "$work/proxies-after.json" || fail "a refused request changed the proxies"
ok "403 foreign Host, 415 text/plain, nothing changed"

# --- 7. kill Order during a burst of keyed orders ----------------------------------------------
step "SIGKILL order during a burst"
# A customer of its own, signed in like any other (its orders are counted
# below by the token's `sub`).
customer="smoke-burst-$(date +%s)"
burst_token=$(sign_in "$customer")
mkdir -p "$work/burst"
(
  for i in $(seq 1 "$burst"); do
    order "$customer-$i" "$pen" "$work/burst/$i.json" "$burst_token" >"$work/burst/$i.status"
    sleep 0.05
  done
) &
burster=$!
sleep 0.5
"${compose[@]}" kill -s SIGKILL order >/dev/null 2>&1 || fail "compose kill"
wait "$burster"
"${compose[@]}" start order >/dev/null 2>&1 || fail "compose start order"
wait_healthy 120
answered=0
for i in $(seq 1 "$burst"); do
  case "$(cat "$work/burst/$i.status")" in 201 | 202) answered=$((answered + 1)) ;; esac
done
# Every key again, until it has an answer: a key answered before the kill
# must give the same order; one cut off may now create its order, once.
for i in $(seq 1 "$burst"); do
  deadline=$(($(date +%s) + 60))
  while :; do
    status=$(order "$customer-$i" "$pen" "$work/burst/$i.again" "$burst_token")
    case "$status" in 201 | 202) break ;; esac
    [ "$(date +%s)" -lt "$deadline" ] || fail "key $customer-$i still answers $status"
    sleep 0.5
  done
  again=$(field "$work/burst/$i.again" '["id"]')
  case "$(cat "$work/burst/$i.status")" in
    201 | 202)
      [ "$(field "$work/burst/$i.json" '["id"]')" = "$again" ] || fail "key $i gave two orders"
      curl -sf -H "authorization: Bearer $burst_token" "$gw/api/orders/$again" -o /dev/null ||
        fail "order $again (answered before the kill) is gone"
      ;;
  esac
  echo "$again" >>"$work/burst/ids"
done
distinct=$(sort -u "$work/burst/ids" | wc -l | tr -d ' ')
[ "$distinct" = "$burst" ] || fail "$burst keys gave $distinct distinct orders"
stored=$("${compose[@]}" exec -T postgres psql -U shopeasy -d order -tAc \
  "SELECT count(*) FROM orders WHERE customer_id = '$customer'" | tr -d '[:space:]')
[ "$stored" = "$burst" ] || fail "$burst keys, but $stored orders stored for them"
ok "$answered of $burst answered 201/202 before the kill; every key one order, none twice"

# --- 8. ownership: another customer sees nothing of smoke's ------------------------------------
step "ownership"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $burst_token" "$gw/api/orders/$pending")
[ "$code" = 404 ] || fail "$customer sees smoke's order $pending: $code, not 404"
code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST -H "authorization: Bearer $burst_token" "$gw/api/orders/$pending/cancel")
[ "$code" = 404 ] || fail "$customer cancels smoke's order $pending: $code, not 404"
get "/api/orders/$pending" -o /dev/null || fail "smoke no longer sees its own order $pending"
ok "404 for another customer's order (show and cancel)"

# --- 9. quiet telemetry without Jaeger ----------------------------------------------------------
step "telemetry without Jaeger"
minutes=$((($(date +%s) - started) / 60 + 1))
warned=0
for service in gateway product order inventory identity; do
  "${compose[@]}" logs --no-color "$service" >"$work/$service.log" 2>&1
  errors=$(grep '"level":"ERROR"' "$work/$service.log" | grep -c opentelemetry || true)
  [ "$errors" = 0 ] || fail "$service: $errors ERROR lines from the trace exporter"
  warns=$(grep -c 'trace export is failing' "$work/$service.log" || true)
  # Order was started twice (the kill): each process may warn once.
  [ "$warns" -le $((minutes + 1)) ] || fail "$service warned $warns times in $minutes min"
  warned=$((warned + warns))
done
[ "$warned" -ge 1 ] || fail "no service said that trace export fails (is OTEL_EXPORTER_OTLP_ENDPOINT set?)"
ok "no ERROR; $warned WARN lines from 5 services in $minutes min"

# --- 10. down -v -----------------------------------------------------------------------------------
step "down -v"
"${compose[@]}" down -v --remove-orphans --timeout 10 >/dev/null 2>&1 || fail "compose down"
[ -z "$(leftovers)" ] || fail "left behind: $(leftovers | tr '\n' ' ')"
ok "no container, network or volume left"

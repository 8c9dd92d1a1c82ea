#!/usr/bin/env bash
# Throughput and latency of shopeasy-gateway against nginx and HAProxy, all
# proxying to the same upstream stub over loopback, plus the stub directly
# and "bare": a bare hyper forwarder (crates/gateway/examples/bare_proxy.rs,
# none of the gateway's work), the floor of the gateway's own stack.
#
#   bench/gateway.sh            # 10 s per target, 50 connections
#   DURATION=30s CONNECTIONS=100 bench/gateway.sh
#   GATEWAY_BIN=target/release/shopeasy-gateway BARE_BIN=target/release/examples/bare_proxy \
#     bench/gateway.sh                                                  # no build
#
# Fairness: every proxy keeps upstream connections alive, logs nothing,
# adds X-Forwarded-For, and uses as many workers/threads as the machine has
# cores. The stub is one nginx worker returning a small JSON body. wrk runs
# with one thread. On a small machine wrk, the stub and the proxy share the
# cores, so compare the ratios, not the absolute numbers.
#
# Needs: wrk, nginx, haproxy (Debian: apt-get install -y wrk nginx haproxy),
# a Rust toolchain. Prints a Markdown table.
set -euo pipefail

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-50}
WARMUP=${WARMUP:-2s}
PATH_UNDER_TEST=/api/products/1
CORES=$(nproc)

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

for tool in wrk nginx haproxy; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y wrk nginx haproxy)" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
STUB=$(free_port); GATEWAY=$(free_port); GATEWAY_ADMIN=$(free_port); NGINX=$(free_port); HAPROXY=$(free_port)
BARE=$(free_port)

# GATEWAY_BIN=path skips the build (use a release binary you already have).
gateway_bin=${GATEWAY_BIN:-}
if [ -z "$gateway_bin" ]; then
    echo "building shopeasy-gateway (release)..." >&2
    (cd "$root" && cargo build --release -q -p shopeasy-gateway)
    gateway_bin=${CARGO_TARGET_DIR:-$root/target}/release/shopeasy-gateway
fi
bare_bin=${BARE_BIN:-}
if [ -z "$bare_bin" ]; then
    (cd "$root" && cargo build --release -q -p shopeasy-gateway --example bare_proxy)
    bare_bin=${CARGO_TARGET_DIR:-$root/target}/release/examples/bare_proxy
fi

nginx_common="daemon off; pid $work/\$name.pid; error_log /dev/null crit;"
nginx_http="access_log off; client_body_temp_path $work/body; proxy_temp_path $work/proxy;
    fastcgi_temp_path $work/fcgi; uwsgi_temp_path $work/uwsgi; scgi_temp_path $work/scgi;
    keepalive_requests 1000000;"

# The upstream stub: one nginx worker answering a small JSON document.
cat > "$work/stub.conf" <<CONF
worker_processes 1; ${nginx_common//\$name/stub}
events { worker_connections 4096; }
http { $nginx_http
  server { listen 127.0.0.1:$STUB;
    location / { default_type application/json; return 200 '{"id":"1","sku":"S-1","name":"stub"}'; } } }
CONF

cat > "$work/nginx.conf" <<CONF
worker_processes $CORES; ${nginx_common//\$name/nginx}
events { worker_connections 4096; }
http { $nginx_http
  upstream stub { server 127.0.0.1:$STUB; keepalive 128; }
  server { listen 127.0.0.1:$NGINX;
    location / { proxy_pass http://stub; proxy_http_version 1.1;
      proxy_set_header Connection ""; proxy_set_header X-Forwarded-For \$remote_addr; } } }
CONF

cat > "$work/haproxy.cfg" <<CONF
global
  nbthread $CORES
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  option forwardfor
  http-reuse always
frontend fe
  bind 127.0.0.1:$HAPROXY
  default_backend be
backend be
  server stub 127.0.0.1:$STUB
CONF

nginx -c "$work/stub.conf" -p "$work" & pids+=($!)
nginx -c "$work/nginx.conf" -p "$work" & pids+=($!); nginx_pid=$!
haproxy -f "$work/haproxy.cfg" & pids+=($!); haproxy_pid=$!
LISTEN_ADDR=127.0.0.1:$GATEWAY ADMIN_ADDR=127.0.0.1:$GATEWAY_ADMIN \
ROUTES__PRODUCT_URL=http://127.0.0.1:$STUB ROUTES__ORDER_URL=http://127.0.0.1:$STUB \
LOG__LEVEL=warn "$gateway_bin" & pids+=($!); gateway_pid=$!
"$bare_bin" "127.0.0.1:$BARE" "127.0.0.1:$STUB" & pids+=($!); bare_pid=$!

wait_for() {
    for _ in $(seq 100); do
        curl -fsS -o /dev/null "http://127.0.0.1:$1$PATH_UNDER_TEST" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing answers on port $1" >&2; exit 1
}
for p in $STUB $GATEWAY $BARE $NGINX $HAPROXY; do wait_for "$p"; done

# CPU ticks of a process and its children: "user system".
ticks() {
    local user=0 system=0 pid
    for pid in $1 $(pgrep -P "$1" || true); do
        [ -r "/proc/$pid/stat" ] || continue
        read -r u s < <(awk '{print $14, $15}' "/proc/$pid/stat")
        user=$(( user + u )); system=$(( system + s ))
    done
    echo "$user $system"
}
HZ=$(getconf CLK_TCK)

declare -A RPS P50 P99 CPU USER SYS
run() { # name port pid
    local name=$1 port=$2 pid=$3 out before after requests per
    wrk -t1 -c"$CONNECTIONS" -d"$WARMUP" "http://127.0.0.1:$port$PATH_UNDER_TEST" >/dev/null
    before=$( [ -n "$pid" ] && ticks "$pid" || echo 0 0 )
    out=$(wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency "http://127.0.0.1:$port$PATH_UNDER_TEST")
    after=$( [ -n "$pid" ] && ticks "$pid" || echo 0 0 )
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
    RPS[$name]=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
    P50[$name]=$(awk '$1=="50%" {print $2}' <<<"$out")
    P99[$name]=$(awk '$1=="99%" {print $2}' <<<"$out")
    if [ -n "$pid" ]; then
        # µs per request: user, system, total.
        per=$(awk -v b="$before" -v a="$after" -v hz="$HZ" -v n="$requests" 'BEGIN {
            split(b, x, " "); split(a, y, " "); u = (y[1] - x[1]) / hz * 1e6 / n; s = (y[2] - x[2]) / hz * 1e6 / n
            printf "%.1f %.1f %.1f", u, s, u + s }')
        read -r USER[$name] SYS[$name] CPU[$name] <<<"$per"
    else
        CPU[$name]="-"; USER[$name]="-"; SYS[$name]="-"
    fi
    if grep -q "Non-2xx\|Socket errors" <<<"$out"; then echo "warning: $name had errors:" >&2; grep "Non-2xx\|Socket errors" <<<"$out" >&2; fi
}

run direct "$STUB" ""
run gateway "$GATEWAY" "$gateway_pid"
run bare "$BARE" "$bare_pid"
run nginx "$NGINX" "$nginx_pid"
run haproxy "$HAPROXY" "$haproxy_pid"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0 || a == "-" || b == "-") print "-"; else printf "%.2f", a / b }'; }

echo
echo "wrk -t1 -c$CONNECTIONS -d$DURATION, $CORES cores, GET $PATH_UNDER_TEST (stub: 1 nginx worker)"
echo
echo "| target | req/s | p50 | p99 | proxy CPU µs/req (user + system) | req/s vs nginx | CPU vs nginx |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for name in direct gateway bare nginx haproxy; do
    echo "| $name | ${RPS[$name]} | ${P50[$name]} | ${P99[$name]} | ${CPU[$name]} (${USER[$name]} + ${SYS[$name]}) | $(ratio "${RPS[$name]}" "${RPS[nginx]}") | $(ratio "${CPU[$name]}" "${CPU[nginx]}") |"
done

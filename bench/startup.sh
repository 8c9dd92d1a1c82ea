#!/usr/bin/env bash
# Start-up time and idle memory of each service binary (release build), on
# SQLite in a scratch folder: time from exec until GET /health/ready answers
# 200, then the resident set size after 2 s idle. Five runs each; prints the
# median. Needs curl.
#
#   bench/startup.sh              # builds the four binaries (release) first
#   BIN_DIR=/path/to/release bench/startup.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin_dir=${BIN_DIR:-}
if [ -z "$bin_dir" ]; then
    (cd "$root" && cargo build --release -q -p shopeasy-gateway -p shopeasy-product -p shopeasy-order -p shopeasy-inventory)
    bin_dir=${CARGO_TARGET_DIR:-$root/target}/release
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { date +%s%3N; }

measure() { # service
    local svc=$1 port admin start ready pid rss
    port=$(free_port); admin=$(free_port)
    start=$(now_ms)
    LISTEN_ADDR=127.0.0.1:$port ADMIN_ADDR=127.0.0.1:$admin LOG__LEVEL=warn \
        DATABASE_URL="sqlite:$work/$svc-$RANDOM.db" "$bin_dir/shopeasy-$svc" >/dev/null 2>&1 &
    pid=$!
    until curl -fs -o /dev/null "http://127.0.0.1:$admin/health/ready"; do sleep 0.005; done
    ready=$(( $(now_ms) - start ))
    sleep 2
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    kill -TERM "$pid"; wait "$pid" || true
    echo "$ready $rss"
}

echo "| service | start-up to ready (median of 5) | idle RSS |"
echo "|---|---:|---:|"
for svc in gateway product order inventory; do
    runs=$(for _ in 1 2 3 4 5; do measure "$svc"; done | sort -n)
    ms=$(awk 'NR==3 {print $1}' <<<"$runs")
    rss=$(awk '{print $2}' <<<"$runs" | sort -n | awk 'NR==3 {printf "%.1f MiB", $1/1024}')
    echo "| $svc | $ms ms | $rss |"
done

#!/usr/bin/env bash
# What the fault proxy adds to a small (64-byte) request/response round trip
# with no toxics, against the same echo server reached directly. Target:
# < 100 µs per round trip. Runs the criterion bench and prints both medians.
#
#   bench/faults.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=$(cargo bench -p shopeasy-faults --bench faults_overhead 2>&1)
echo "$out" | grep -E '^round_trip_64B|time:' | sed 's/^ *//'

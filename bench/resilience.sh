#!/usr/bin/env bash
# Resilience crate benchmarks (issue 3): the full client stack around an
# always-ready in-memory service, a call on an open breaker, one vs two
# threads, and our retry + budget against tower's Retry + TpsBudget.
#
#   bench/resilience.sh                      # on-CPU time (default)
#   BENCH_CLOCK=wall bench/resilience.sh     # wall-clock time
#   BENCH_SECONDS=10 bench/resilience.sh     # longer samples
#
# Figures from the build machine: bench/resilience.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
exec cargo bench -p shopeasy-resilience --bench resilience -- \
  --warm-up-time 1 --measurement-time "${BENCH_SECONDS:-8}"

#!/usr/bin/env bash
# Runs the benchmarks against a fresh single-node Kafka broker:
#   bench/run.sh [--records N] [--value-bytes B] [--partitions P] [--parallelism K]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
scripts/build.sh >/dev/null
dir="$(mktemp -d /tmp/weir-bench-XXXXXX)"
trap 'scripts/kafka.sh stop "$dir/kafka" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
scripts/kafka.sh start "$dir/kafka" >/dev/null
WEIR_TEST_KAFKA_DIR="$dir/kafka" build/bin/kafka_copy_bench "$@"

#!/usr/bin/env bash
# Installs the dependencies, builds Weir and runs every test (ctest): unit
# tests, integration tests that start the real daemons, and tests against a
# real Kafka broker (started once per run by the CTest fixture in
# tests/kafka, with Kafka fetched from Maven Central on first use).
#
#   scripts/test.sh                 all tests
#   scripts/test.sh -L unit         only the unit tests (any ctest arguments work)
#   WEIR_SANITIZE=1 scripts/test.sh the same under AddressSanitizer + UBSan
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh
if [ "${WEIR_SANITIZE:-0}" = 1 ]; then build_dir="${WEIR_BUILD_DIR:-build-asan}"; else build_dir="${WEIR_BUILD_DIR:-build}"; fi

# Never leave a broker behind, even if ctest is interrupted.
trap 'scripts/kafka.sh stop "$build_dir/test-kafka" >/dev/null 2>&1 || true' EXIT
cd "$build_dir"
ctest --output-on-failure --timeout 900 -j "${WEIR_TEST_JOBS:-2}" "$@"

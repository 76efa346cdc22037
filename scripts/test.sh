#!/usr/bin/env bash
# Installs the dependencies, builds Weir and runs every test (ctest): unit
# tests, integration tests that start the real daemons, and tests against a
# real Kafka broker (started once per run by the CTest fixture in
# tests/kafka, with Kafka fetched from Maven Central on first use) and
# against S3Proxy (the fixture in tests/s3, likewise).
#
# Without arguments it then runs the unit tests again under ThreadSanitizer
# (scripts/test-tsan.sh) and every fuzz target for 10 s (scripts/fuzz.sh).
#
#   scripts/test.sh                 all tests, TSan and the short fuzz run
#   scripts/test.sh -L unit         only the unit tests (any ctest arguments work;
#                                   with arguments, neither TSan nor fuzzing)
#   WEIR_SANITIZE=1 scripts/test.sh the same under AddressSanitizer + UBSan
#   WEIR_TSAN=0 / WEIR_FUZZ=0       skip the TSan run / the fuzz run
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh
if [ "${WEIR_SANITIZE:-0}" = 1 ]; then build_dir="${WEIR_BUILD_DIR:-build-asan}"; else build_dir="${WEIR_BUILD_DIR:-build}"; fi

# Never leave a broker or an S3 server behind, even if ctest is interrupted.
trap 'scripts/kafka.sh stop "$build_dir/test-kafka" >/dev/null 2>&1 || true; scripts/kafka.sh stop "$build_dir/test-kafka-cluster" >/dev/null 2>&1 || true; scripts/s3.sh stop "$build_dir/test-s3" >/dev/null 2>&1 || true' EXIT
(cd "$build_dir" && ctest --output-on-failure --timeout 900 -j "${WEIR_TEST_JOBS:-2}" "$@")
if [ $# -eq 0 ]; then
  if [ "${WEIR_TSAN:-1}" != 0 ]; then scripts/test-tsan.sh; fi
  if [ "${WEIR_FUZZ:-1}" != 0 ]; then scripts/fuzz.sh --seconds "${WEIR_FUZZ_SECONDS:-10}"; fi
fi

#!/usr/bin/env bash
# Runs the unit and in-process tests (ctest -L unit) under ThreadSanitizer:
# builds an instrumented Abseil once (scripts/build-tsan-abseil.sh), builds
# the unit tests with -DWEIR_TSAN=ON in build-tsan/, and runs them with that
# Abseil loaded. A race or a lock-order inversion fails the test that hit it.
#
#   scripts/test-tsan.sh               every unit test
#   scripts/test-tsan.sh -R mailbox    any ctest arguments
#
# tests/tsan.supp lists what TSan reports inside libraries (each entry says
# why); Weir's own code has no suppressions. network_data_exchange_test is
# left out: it runs real gRPC streams in-process, and gRPC's C core (built
# without TSan) hands its own objects between threads in ways TSan cannot
# see, which it reports as races inside gRPC (checked again with the
# asynchronous data exchange: every report's racing accesses are in gRPC's
# call operations or protobuf parsing of gRPC's buffers). rpc_fan_out_test
# is left out for the same reason: its calls go to a real gRPC server in the
# test process, and TSan reports the server's request matching inside gRPC.
# rpc_test too: its channel test connects to a real gRPC server in the test
# process (a report inside gRPC's transport, its write buffers handed between
# the caller's and the server's threads); its other test starts no thread.
# kafka_memory_test is left out: it checks derived sizes by creating real
# librdkafka clients (uninstrumented), whose threads crash inside TSan's
# allocator when handed the largest fetch sizes; the test has no threads of
# Weir's own. The data path's own
# concurrency (result partitions, credits, record writers, input gates fed
# in-process) is covered by the other network and task tests.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh >/dev/null
abseil=$(scripts/build-tsan-abseil.sh)
build_dir="${WEIR_TSAN_BUILD_DIR:-build-tsan}"
# clang: its -Wthread-safety (errors, see cmake/WeirCompileOptions.cmake)
# checks every ABSL_GUARDED_BY of the code this builds, beside TSan at run time.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DWEIR_TSAN=ON \
  >/dev/null
ninja -C "$build_dir" -j "${WEIR_BUILD_JOBS:-$(nproc)}" unit_tests

export LD_LIBRARY_PATH="$abseil/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp ${TSAN_OPTIONS:-}"
# The instrumented Abseil must be the one the tests load.
probe=$(ls "$build_dir"/bin/mailbox_test)
if ! grep -q "$abseil/lib/libabsl_synchronization" <<<"$(ldd "$probe")"; then
  echo "test-tsan: $probe does not load Abseil from $abseil/lib" >&2
  exit 1
fi
cd "$build_dir"
ctest --output-on-failure --timeout 900 -L unit -E '^(network_data_exchange_test|rpc_fan_out_test|rpc_test|kafka_memory_test)$' -j "${WEIR_TEST_JOBS:-2}" "$@"

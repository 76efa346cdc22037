#!/usr/bin/env bash
# Configures and builds Weir with CMake + Ninja.
#   scripts/build.sh            -> build/        (RelWithDebInfo), every target
#   scripts/build.sh TARGET...  -> only those targets (and what they need)
#   WEIR_SANITIZE=1 scripts/build.sh -> build-asan/ (AddressSanitizer + UBSan)
# WEIR_BUILD_DIR overrides the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize="${WEIR_SANITIZE:-0}"
if [ "$sanitize" = 1 ]; then
  build_dir="${WEIR_BUILD_DIR:-build-asan}"
  san_flag=ON
else
  build_dir="${WEIR_BUILD_DIR:-build}"
  san_flag=OFF
fi

# The TSan and fuzz builds have directories of their own (test-tsan.sh, fuzz.sh).
cmake -S . -B "$build_dir" -G Ninja -DWEIR_SANITIZE="$san_flag" -DWEIR_TSAN=OFF -DWEIR_FUZZ=OFF >/dev/null
# Two parallel compile jobs: gRPC-heavy translation units take ~1 GiB each.
ninja -C "$build_dir" -j "${WEIR_BUILD_JOBS:-$(nproc)}" "$@"
echo "build.sh: binaries are in $build_dir/bin"

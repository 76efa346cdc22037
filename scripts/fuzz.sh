#!/usr/bin/env bash
# Builds the fuzz targets of tests/fuzz/ as libFuzzer binaries (clang, with
# AddressSanitizer and UBSan) in build-fuzz/, and runs each one, starting
# from the checked-in corpus in tests/fuzz/corpus/<target>/.
#
#   scripts/fuzz.sh                     10 s per target (what CI runs)
#   scripts/fuzz.sh --seconds 3600      a long run (docs/security.md)
#   scripts/fuzz.sh --merge             then add the new inputs worth keeping
#                                       to tests/fuzz/corpus (minimized)
#   scripts/fuzz.sh --only config_fuzz  one target
#
# A crash, a leak or a timeout fails the script and leaves the input that
# caused it as build-fuzz/crash-<target>-*: replay it with
# build/bin/<target> FILE (the regular build) or build-fuzz/bin/<target> FILE.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=10
merge=0
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    --only) only=$2; shift 2 ;;
    *) echo "fuzz.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh >/dev/null
build_dir="${WEIR_FUZZ_BUILD_DIR:-build-fuzz}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DWEIR_FUZZ=ON \
  >/dev/null
ninja -C "$build_dir" -j "${WEIR_BUILD_JOBS:-$(nproc)}" fuzz_targets

failed=()
for source in tests/fuzz/*_fuzz.cc; do
  target=$(basename "$source" .cc)
  [ -z "$only" ] || [ "$only" = "$target" ] || continue
  found="$build_dir/corpus/$target"
  mkdir -p "$found"
  echo "fuzz.sh: $target for ${seconds} s"
  # New inputs go to the first directory; the checked-in corpus seeds it.
  if ! "$build_dir/bin/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$build_dir/crash-$target-" -print_final_stats=1 "$found" "tests/fuzz/corpus/$target" \
      > "$build_dir/$target.log" 2>&1; then
    tail -n 60 "$build_dir/$target.log" >&2
    failed+=("$target")
    continue
  fi
  grep -E "^stat::(number_of_executed_units|new_units_added)" "$build_dir/$target.log" | tr '\n' ' '
  echo
  if [ "$merge" = 1 ]; then
    "$build_dir/bin/$target" -merge=1 "tests/fuzz/corpus/$target" "$found" > /dev/null 2>&1
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in $build_dir/crash-*)" >&2
  exit 1
fi
echo "fuzz.sh: every target ran ${seconds} s without a finding"

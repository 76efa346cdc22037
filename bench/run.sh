#!/usr/bin/env bash
# Runs a benchmark against a fresh single-node Kafka broker:
#   bench/run.sh [copy] [--records N] [--value-bytes B] [--partitions P] [--parallelism K] [--checkpoint-ms M]
#   bench/run.sh latency [--rate R] [--seconds S] [--checkpoint-ms M] [--parallelism P] [--keep-logs DIR]
#   bench/run.sh checkpoint [--records N] [--keys K] [--parallelism P] [--state-backend rocksdb|hashmap]
#                            [--state-keys N] [--phases all|throughput|big-state] [--flink]
#   bench/run.sh sinks [--records N] [--keys K] [--parallelism P] [--checkpoint-ms M] [--probes N]
#   bench/run.sh network [--parallelism 2,16,64] [--records N] [--value-bytes B] [--baseline-bin DIR] [--rounds R]
#                        [--cluster-config -Dk=v,...] [--baseline-config -Dk=v,...]
#   bench/run.sh fleet [--sizes TMS:TASKS,...] [--taskmanagers-per-host K] [--checkpoints N] [--checkpoint-ms M]
#                      [--window-s S] [--idle-ms I] [--baseline-jobmanager PATH] [--keep-logs DIR]
#     (no broker; --baseline fleet builds the JobManager of git revision REV into build-baseline/ and passes it:
#      bench/run.sh fleet --baseline REV [flags]; --ha runs HA off beside HA on against a throw-away etcd:
#      bench/run.sh fleet --ha [flags])
#   bench/run.sh memory [--records N] [--parallelism K] [--rounds R] [--budget SIZE] [--jobs copy,keyed]
#                       [--guarantee exactly-once|at-least-once] [--checkpoint-ms M]
#                       [--baseline-bin DIR] [--baseline-budget SIZE]
#   bench/run.sh nexmark [--events N] [--event-rate R] [--queries q0,q1,q2,q5] [--parallelism P]
#                        [--checkpoint-ms M] [--rounds R] [--flink] [--baseline-bin DIR]
#                        [--cluster-config -Dk=v,...] [--baseline-config -Dk=v,...]
#                        [--max-drift-ms D] [--flink-max-drift-ms D] [--job-args a,b] [--baseline-job-args a,b]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
scripts/build.sh >/dev/null
# The network and fleet benches need no broker.
if [[ "${1:-}" == network ]]; then
  shift
  exec build/bin/network_bench "$@"
fi
if [[ ${1:-} == fleet ]]; then
  shift
  args=()
  while [[ $# -gt 0 ]]; do
    if [[ $1 == --baseline ]]; then
      # The JobManager of an earlier revision, built apart, beside this build's.
      src="$(mktemp -d /tmp/weir-baseline-XXXXXX)"
      git archive "$2" | tar -x -C "$src"
      cmake -S "$src" -B build-baseline -G Ninja -DWEIR_TSAN=OFF -DWEIR_FUZZ=OFF >/dev/null
      ninja -C build-baseline weir-jobmanager >/dev/null
      args+=(--baseline-jobmanager "$PWD/build-baseline/bin/weir-jobmanager")
      shift 2
    elif [[ $1 == --ha ]]; then
      # HA off beside HA on (an election on a throw-away etcd server).
      etcd_dir="$(mktemp -d /tmp/weir-bench-etcd-XXXXXX)"
      trap 'scripts/etcd.sh stop "$etcd_dir" >/dev/null 2>&1 || true; rm -rf "$etcd_dir"' EXIT
      args+=(--ha-etcd "$(scripts/etcd.sh start "$etcd_dir" | tail -1)")
      shift
    else
      args+=("$1")
      shift
    fi
  done
  build/bin/fleet_bench "${args[@]}"
  exit $?
fi
dir="$(mktemp -d /tmp/weir-bench-XXXXXX)"
trap 'scripts/kafka.sh stop "$dir/kafka" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
scripts/kafka.sh start "$dir/kafka" >/dev/null
bench=kafka_copy_bench
case "${1:-}" in
  copy) shift ;;
  checkpoint) bench=checkpoint_bench; shift ;;
  latency) bench=latency_bench; shift ;;
  sinks) bench=sink_bench; shift ;;
  memory) bench=memory_bench; shift ;;
  nexmark) bench=nexmark_bench; shift ;;
esac
# checkpoint/nexmark --flink: the same jobs on Apache Flink beside Weir's (bench/flink).
args=()
for a in "$@"; do
  if [[ ($bench == checkpoint_bench || $bench == nexmark_bench) && $a == --flink ]]; then
    args+=(--flink-classpath "$(bench/flink/build.sh)")
  else
    args+=("$a")
  fi
done
WEIR_TEST_KAFKA_DIR="$dir/kafka" "build/bin/$bench" "${args[@]}"

#!/usr/bin/env bash
# Weir's main job, from a fresh Debian 12 machine: installs the dependencies,
# builds, starts a local Kafka broker (fetched from Maven Central on first
# use), a JobManager and two TaskManagers, and runs the keyed_count job
# exactly-once with parallelism 2 across both TaskManagers, checkpointing
# every second. While words keep arriving it kills one TaskManager with
# SIGKILL and starts a replacement; the job restarts by itself from its last
# checkpoint, and the counts it committed to Kafka are checked as a
# read_committed consumer sees them: for every word exactly 1, 2, ..., n —
# nothing lost, nothing written twice, across the crash.
#
# Everything is stopped at the end unless WEIR_KEEP_RUNNING=1 (then stop it
# with: scripts/local-cluster.sh stop; scripts/kafka.sh stop .weir-local/kafka).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
# Only what this script runs: the daemons, the client, the job and the demo
# data tool (not the tests, benchmarks and fuzz targets).
scripts/build.sh weir-jobmanager weir-taskmanager weir keyed_count kafka_demo_data

local_dir="${WEIR_LOCAL_DIR:-$(pwd)/.weir-local}"
export WEIR_LOCAL_DIR="$local_dir"
bin=build/bin
jm="127.0.0.1:${WEIR_JOBMANAGER_PORT:-6123}"
words=20000

cleanup() {
  scripts/local-cluster.sh stop || true
  scripts/kafka.sh stop "$local_dir/kafka" >/dev/null 2>&1 || true
}
scripts/local-cluster.sh stop
if [ "${WEIR_KEEP_RUNNING:-0}" != 1 ]; then trap cleanup EXIT; fi

echo "== starting a Kafka broker"
bootstrap="$(scripts/kafka.sh start "$local_dir/kafka")"
echo "Kafka at $bootstrap"

echo "== starting a JobManager and two TaskManagers"
# A fresh demo: forget the jobs of an earlier run of this script (a
# restarted JobManager would take them back, but their broker is gone).
rm -rf "$local_dir/ha/jobs"
scripts/local-cluster.sh start 2
"$bin/weir" --jobmanager "$jm" cluster

in_topic="words-$(date +%s)"
out_topic="word-counts-$(date +%s)"
echo "== writing $words words to $in_topic"
"$bin/kafka_demo_data" produce "$bootstrap" "$in_topic" "$words"
"$bin/kafka_demo_data" topic "$bootstrap" "$out_topic"

echo "== submitting keyed_count exactly-once (parallelism 2, a checkpoint every second)"
echo "\$ weir submit build/jobs/keyed_count.so -p 2 -Dexecution.checkpointing.interval=1s -- --brokers $bootstrap --input-topic $in_topic --output-topic $out_topic --guarantee exactly-once"
job="$("$bin/weir" --jobmanager "$jm" submit build/jobs/keyed_count.so -p 2 -Dexecution.checkpointing.interval=1s -- \
  --brokers "$bootstrap" --input-topic "$in_topic" --output-topic "$out_topic" --guarantee exactly-once)"
echo "job $job"

job_field() {
  "$bin/weir" --jobmanager "$jm" --json status "$job" | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"
}
wait_running() {  # attempt
  for _ in $(seq 1 600); do
    [ "$(job_field state)" = RUNNING ] && [ "$(job_field attempt)" -ge "$1" ] && return 0
    case "$(job_field state)" in FAILED|CANCELED|FINISHED) break ;; esac
    sleep 0.2
  done
  echo "the job is $(job_field state), not running; logs are in $local_dir" >&2
  "$bin/weir" --jobmanager "$jm" status "$job" >&2
  exit 1
}
completed_checkpoints() {
  "$bin/weir" --jobmanager "$jm" --json checkpoints "$job" | python3 -c 'import json,sys; print(json.load(sys.stdin)["completed"])'
}
jm_lines() { grep -E "checkpoint [0-9]+ (completed|aborted)|RESTARTING|restoring|RUNNING \(attempt" "$local_dir/jobmanager.log" | tail -n "$1"; }

wait_running 1
for _ in $(seq 1 300); do [ "$(completed_checkpoints)" -ge 2 ] && break; sleep 0.2; done
echo "== the JobManager's log so far"
jm_lines 4

echo "== writing $words more words, and killing TaskManager 1 with SIGKILL while the job counts them"
"$bin/kafka_demo_data" append "$bootstrap" "$in_topic" "$words" "$words" &
writer=$!
sleep 0.5
scripts/local-cluster.sh kill-taskmanager 1
wait "$writer"
echo "== starting a replacement TaskManager, as systemd or Kubernetes would"
scripts/local-cluster.sh start-taskmanager 3
wait_running 2
echo "== the JobManager's log: failure, restart, restore"
jm_lines 6

echo "== writing $words more words"
"$bin/kafka_demo_data" append "$bootstrap" "$in_topic" "$((2 * words))" "$words"
total=$((3 * words))

echo "== waiting until the counts of all $total words are committed to $out_topic"
for _ in $(seq 1 300); do
  "$bin/kafka_demo_data" check "$bootstrap" "$out_topic" "$total" >/dev/null 2>&1 && break
  sleep 0.5
done
echo "\$ weir status $job"
"$bin/weir" --jobmanager "$jm" status "$job"
echo "\$ weir checkpoints $job"
"$bin/weir" --jobmanager "$jm" checkpoints "$job" | head -8
echo "== reading $out_topic"
"$bin/kafka_demo_data" check "$bootstrap" "$out_topic" "$total"
"$bin/weir" --jobmanager "$jm" cancel "$job" >/dev/null

#!/usr/bin/env bash
# Weir's main job, from a fresh Debian 12 machine: installs the dependencies,
# builds, starts a local Kafka broker (fetched from Maven Central on first
# use), a JobManager and two TaskManagers, writes words into a topic, runs
# the keyed_count job with parallelism 2 across both TaskManagers (at-least-
# once: exactly-once needs checkpoints, not built yet), and checks the counts
# it wrote back to Kafka.
#
# Everything is stopped at the end unless WEIR_KEEP_RUNNING=1 (then stop it
# with: scripts/local-cluster.sh stop; scripts/kafka.sh stop .weir-local/kafka).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh

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
scripts/local-cluster.sh start 2
"$bin/weir" --jobmanager "$jm" cluster

in_topic="words-$(date +%s)"
out_topic="word-counts-$(date +%s)"
echo "== writing $words words to $in_topic"
"$bin/kafka_demo_data" produce "$bootstrap" "$in_topic" "$words"
"$bin/kafka_demo_data" topic "$bootstrap" "$out_topic"

echo "== submitting keyed_count (parallelism 2)"
echo "\$ weir submit build/jobs/keyed_count.so -p 2 -- --brokers $bootstrap --input-topic $in_topic --output-topic $out_topic --bounded"
job="$("$bin/weir" --jobmanager "$jm" submit build/jobs/keyed_count.so -p 2 -- \
  --brokers "$bootstrap" --input-topic "$in_topic" --output-topic "$out_topic" --guarantee at-least-once --bounded)"
echo "job $job"
state=""
for _ in $(seq 1 600); do
  state="$("$bin/weir" --jobmanager "$jm" --json status "$job" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')"
  case "$state" in FINISHED|FAILED|CANCELED) break ;; esac
  sleep 0.2
done
echo "\$ weir status $job"
"$bin/weir" --jobmanager "$jm" status "$job"
[ "$state" = FINISHED ] || { echo "the job ended $state; logs are in $local_dir" >&2; exit 1; }

echo "== reading $out_topic"
"$bin/kafka_demo_data" check "$bootstrap" "$out_topic" "$words"

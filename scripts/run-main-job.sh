#!/usr/bin/env bash
# Weir's main job, from a fresh Debian 12 machine: installs the dependencies,
# builds, starts a local JobManager and two TaskManagers and shows the
# cluster. (The exactly-once Kafka pipeline joins this script once job
# submission and checkpoints land.)
#
# On a terminal it keeps the cluster up until Ctrl-C; otherwise it stops the
# cluster right after showing it. WEIR_KEEP_RUNNING=1 leaves it running
# (stop it with scripts/local-cluster.sh stop).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh

scripts/local-cluster.sh stop
if [ "${WEIR_KEEP_RUNNING:-0}" != 1 ]; then trap 'scripts/local-cluster.sh stop' EXIT; fi
scripts/local-cluster.sh start 2
echo
echo "$ weir cluster"
build/bin/weir --jobmanager 127.0.0.1:"${WEIR_JOBMANAGER_PORT:-6123}" cluster
echo
if [ "${WEIR_KEEP_RUNNING:-0}" = 1 ]; then
  echo "The cluster keeps running; stop it with scripts/local-cluster.sh stop"
elif [ -t 0 ]; then
  echo "Cluster running (logs in .weir-local/). Press Ctrl-C to stop it."
  while sleep 3600; do :; done
fi

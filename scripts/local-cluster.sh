#!/usr/bin/env bash
# A local Weir cluster for trying things out: one JobManager and N
# TaskManagers on 127.0.0.1, with their logs and pids in $WEIR_LOCAL_DIR
# (default .weir-local/ in the checkout).
#
#   scripts/local-cluster.sh start [N]   start a JobManager and N (default 2) TaskManagers
#   scripts/local-cluster.sh stop        stop them (SIGTERM, then SIGKILL after 10 s)
#   scripts/local-cluster.sh status      weir cluster
#   scripts/local-cluster.sh kill-taskmanager I    SIGKILL TaskManager I (a crash)
#   scripts/local-cluster.sh start-taskmanager I   start TaskManager I (again), as systemd would
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
bin="${WEIR_BIN_DIR:-$root/build/bin}"
dir="${WEIR_LOCAL_DIR:-$root/.weir-local}"
port="${WEIR_JOBMANAGER_PORT:-6123}"
# The JobManager's HTTP port: any free one unless set (8081 is often taken).
rest_port="${WEIR_REST_PORT:-0}"
# This is a throwaway cluster: not the host's installed /etc/weir/weir.yaml.
export WEIR_CONFIG_FILE="${WEIR_CONFIG_FILE:-/dev/null}"

log() { echo "local-cluster: $*" >&2; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_taskmanager() {
  local i="$1"
  setsid "$bin/weir-taskmanager" -Djobmanager.rpc.port="$port" -Dtaskmanager.numberOfTaskSlots=2 \
    -Dtaskmanager.resource-id="tm-local-$i" -Dio.tmp.dirs="$dir" >>"$dir/taskmanager-$i.log" 2>&1 < /dev/null &
  echo $! > "$dir/taskmanager-$i.pid"
}

kill_taskmanager() {
  local f="$dir/taskmanager-$1.pid"
  alive "$f" || { log "TaskManager $1 is not running"; return 1; }
  kill -KILL "$(cat "$f")"
  rm -f "$f"
  log "killed TaskManager $1 (SIGKILL)"
}

start() {
  local n="${1:-2}"
  mkdir -p "$dir"
  if alive "$dir/jobmanager.pid"; then
    log "already running (pid $(cat "$dir/jobmanager.pid")); use '$0 stop' first"
    exit 1
  fi
  [ -x "$bin/weir-jobmanager" ] || { log "no binaries in $bin; run scripts/build.sh first"; exit 1; }
  setsid "$bin/weir-jobmanager" -Djobmanager.rpc.port="$port" -Drest.port="$rest_port" \
    -Dhigh-availability.storageDir="$dir/ha" \
    >"$dir/jobmanager.log" 2>&1 < /dev/null &
  echo $! > "$dir/jobmanager.pid"
  # TaskManagers only once this JobManager serves: with the port taken by
  # another process they would join whatever listens there.
  local serving=0
  for _ in $(seq 1 100); do
    if ! alive "$dir/jobmanager.pid"; then
      log "the JobManager exited (a port taken? WEIR_JOBMANAGER_PORT sets the RPC port, WEIR_REST_PORT the HTTP one):"
      tail -5 "$dir/jobmanager.log" >&2
      stop >/dev/null; exit 1
    fi
    if grep -q "listening on" "$dir/jobmanager.log" 2>/dev/null; then serving=1; break; fi
    sleep 0.1
  done
  if [ "$serving" = 0 ]; then
    log "the JobManager did not start serving within 10 s; see $dir/jobmanager.log"
    stop >/dev/null; exit 1
  fi
  for i in $(seq 1 "$n"); do : > "$dir/taskmanager-$i.log"; start_taskmanager "$i"; done
  # Wait until every TaskManager has registered.
  for _ in $(seq 1 100); do
    if [ "$("$bin/weir" --jobmanager "127.0.0.1:$port" --json cluster 2>/dev/null | grep -c '"id"')" = "$n" ]; then
      local http
      http=$(grep -o "JobManager REST listening on http://[^ ]*" "$dir/jobmanager.log" | head -1 | sed 's/.* on //')
      log "JobManager on 127.0.0.1:$port (HTTP $http) with $n TaskManagers; logs in $dir"
      return 0
    fi
    if ! alive "$dir/jobmanager.pid"; then
      log "the JobManager exited:"; tail -5 "$dir/jobmanager.log" >&2; stop >/dev/null; exit 1
    fi
    sleep 0.1
  done
  log "TaskManagers did not all register within 10 s; see the logs in $dir; stopping what started"
  stop >/dev/null
  exit 1
}

stop() {
  [ -d "$dir" ] || return 0
  local pids=()
  for f in "$dir"/taskmanager-*.pid "$dir"/jobmanager.pid; do
    [ -f "$f" ] || continue
    if alive "$f"; then pids+=("$(cat "$f")"); kill -TERM "$(cat "$f")" 2>/dev/null || true; fi
    rm -f "$f"
  done
  for _ in $(seq 1 100); do
    local running=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
    [ "$running" = 0 ] && { log "stopped"; return 0; }
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  log "stopped (some processes needed SIGKILL)"
}

case "${1:-}" in
  start) start "${2:-2}" ;;
  stop) stop ;;
  status) "$bin/weir" --jobmanager "127.0.0.1:$port" cluster ;;
  kill-taskmanager) kill_taskmanager "${2:?which TaskManager}" ;;
  start-taskmanager) start_taskmanager "${2:?which TaskManager}"; log "started TaskManager $2" ;;
  *) echo "usage: $0 start [N] | stop | status | kill-taskmanager I | start-taskmanager I" >&2; exit 2 ;;
esac

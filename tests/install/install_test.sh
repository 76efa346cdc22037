#!/usr/bin/env bash
# Install, systemd units and a job built against the installed Weir, end to
# end:
#   1. `cmake --install` into a temporary prefix puts everything in place;
#   2. `systemd-analyze verify` accepts both units and `systemd-analyze
#      security` rates them 2.0 or better (docs/operations.md has the score);
#   3. each daemon, started with its unit's ExecStart command line (the
#      specifiers systemd would fill in filled in) and a NOTIFY_SOCKET this
#      test listens on, sends READY=1 once it serves or has registered, and
#      WATCHDOG=1 after it;
#   4. a job built with find_package(Weir) against the installed headers runs
#      on those daemons to FINISHED.
# Usage: install_test.sh BUILD_DIR
set -euo pipefail

build=$(cd "$1" && pwd)
work=$(mktemp -d /tmp/weir-install-test.XXXXXX)
prefix="$work/prefix"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "install_test: FAIL: $*" >&2; for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -30 "$f"; }; done >&2; exit 1; }
step() { echo "install_test: $*"; }

step "installing into $prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log" || fail "cmake --install failed"
for f in bin/weir bin/weir-jobmanager bin/weir-taskmanager include/weir/job.h include/weir/metrics.h \
         lib/cmake/Weir/WeirConfig.cmake lib/cmake/Weir/WeirTargets.cmake etc/weir/weir.yaml \
         lib/systemd/system/weir-jobmanager.service lib/systemd/system/weir-taskmanager@.service; do
  [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
done
# An existing configuration is kept on a second install.
echo "# edited by the operator" >> "$prefix/etc/weir/weir.yaml"
cmake --install "$build" --prefix "$prefix" > "$work/install2.log" || fail "second cmake --install failed"
grep -q "edited by the operator" "$prefix/etc/weir/weir.yaml" || fail "a second install overwrote weir.yaml"

# DESTDIR stages everything, the configuration file included, under it.
DESTDIR="$work/stage" cmake --install "$build" --prefix /opt/weir > "$work/install3.log" || fail "DESTDIR install failed"
for f in opt/weir/bin/weir-jobmanager opt/weir/etc/weir/weir.yaml opt/weir/lib/systemd/system/weir-jobmanager.service; do
  [ -e "$work/stage/$f" ] || fail "DESTDIR install did not stage $f"
done
grep -q "^ExecStart=/opt/weir/bin/weir-jobmanager --config /opt/weir/etc/weir/weir.yaml" \
  "$work/stage/opt/weir/lib/systemd/system/weir-jobmanager.service" || fail "the staged unit names the wrong paths"

units="$prefix/lib/systemd/system"
step "systemd-analyze verify and security"
for unit in weir-jobmanager.service weir-taskmanager@.service; do
  systemd-analyze verify "$units/$unit" > "$work/verify.log" 2>&1 || fail "systemd-analyze verify $unit: $(cat "$work/verify.log")"
  [ -s "$work/verify.log" ] && fail "systemd-analyze verify $unit complained: $(cat "$work/verify.log")"
  score=$(systemd-analyze security --offline=yes "$units/$unit" 2>&1 | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p')
  [ -n "$score" ] || fail "no exposure score for $unit"
  step "  $unit: exposure $score"
  python3 -c "import sys; sys.exit(0 if float('$score') <= 2.0 else 1)" || fail "$unit exposure $score is above 2.0"
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rpc_port=$(free_port); rest_port=$(free_port)
# The configuration file, not the command line, is what differs from a real
# host: free ports and this test's directories (a key may appear once).
sed -i -E '/^(jobmanager\.rpc\.port|rest\.port|high-availability\.storageDir|log\.format):/d' \
  "$prefix/etc/weir/weir.yaml"
cat >> "$prefix/etc/weir/weir.yaml" <<YAML
jobmanager.rpc.port: $rpc_port
rest.port: $rest_port
high-availability.storageDir: $work/ha
log.format: text
YAML

# ExecStart of a unit, with the specifiers systemd would fill in.
exec_start() {
  sed -n 's/^ExecStart=//p' "$units/$1" | sed -e "s|%H|$(hostname)|g" -e "s|%i|1|g" -e "s|%S|$work/state|g"
}

# Listens on a NOTIFY_SOCKET and appends every datagram to a file.
listen() {
  python3 - "$1" "$2" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a") as out:
    while True:
        out.write(s.recv(4096).decode().replace("\n", " ") + "\n")
        out.flush()
PY
  pids+=($!)
  disown $!
}

wait_for_line() {  # file pattern seconds
  for _ in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

start_daemon() {  # name unit
  local name=$1 unit=$2
  listen "$work/$name.sock" "$work/$name.notify"
  for _ in $(seq 1 50); do [ -S "$work/$name.sock" ] && break; sleep 0.1; done
  read -r -a argv <<< "$(exec_start "$unit")"
  step "starting $name as its unit does: ${argv[*]}"
  NOTIFY_SOCKET="$work/$name.sock" WATCHDOG_USEC=1000000 "${argv[@]}" > "$work/$name.log" 2>&1 &
  pids+=($!)
  disown $!
}

start_daemon jobmanager weir-jobmanager.service
wait_for_line "$work/jobmanager.notify" "READY=1" 30 || fail "the JobManager sent no READY=1"
grep -q "listening on" "$work/jobmanager.log" || fail "READY=1 came before the JobManager served"
wait_for_line "$work/jobmanager.notify" "WATCHDOG=1" 10 || fail "the JobManager does not feed the watchdog"
step "JobManager: READY=1 and WATCHDOG=1 received"

start_daemon taskmanager weir-taskmanager@.service
wait_for_line "$work/taskmanager.notify" "READY=1" 30 || fail "the TaskManager sent no READY=1"
grep -q "registered with JobManager" "$work/taskmanager.log" || fail "READY=1 came before the TaskManager registered"
wait_for_line "$work/taskmanager.notify" "WATCHDOG=1" 10 || fail "the TaskManager does not feed the watchdog"
step "TaskManager: READY=1 (after registering) and WATCHDOG=1 received"

step "building a job with find_package(Weir) against $prefix"
cp -r "$(dirname "$0")/job" "$work/job"
cmake -S "$work/job" -B "$work/job-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  > "$work/job-cmake.log" 2>&1 || fail "configuring the job: $(tail -20 "$work/job-cmake.log")"
cmake --build "$work/job-build" > "$work/job-build.log" 2>&1 || fail "building the job: $(tail -20 "$work/job-build.log")"
[ -f "$work/job-build/count_numbers.so" ] || fail "no count_numbers.so"

weir=("$prefix/bin/weir" --jobmanager "127.0.0.1:$rpc_port")
job=$("${weir[@]}" --json submit "$work/job-build/count_numbers.so" -- --count 5000 \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])') || fail "weir submit failed"
step "submitted job $job"
state=""
for _ in $(seq 1 600); do
  state=$("${weir[@]}" --json status "$job" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  case "$state" in FINISHED) break ;; FAILED|CANCELED) fail "job $state: $("${weir[@]}" status "$job")" ;; esac
  sleep 0.1
done
[ "$state" = FINISHED ] || fail "job not FINISHED within 60 s (state $state)"
records=$("${weir[@]}" --json status "$job" | python3 -c '
import json, sys
tasks = json.load(sys.stdin)["tasks"]
print(sum(t["records_in"] for t in tasks if "Discard" in t["name"]))')
[ "$records" = 5000 ] || fail "the sink took $records records, expected 5000"
step "job FINISHED; its sink took all 5000 records"

kill -TERM "${pids[3]}" "${pids[1]}"  # the daemons, as systemctl stop would
wait_for_line "$work/jobmanager.notify" "STOPPING=1" 30 || fail "the JobManager sent no STOPPING=1"
echo "install_test: PASS"

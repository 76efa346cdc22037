# Helpers of the scripts that run throw-away servers for tests (kafka.sh,
# redis.sh, postgres.sh, mariadb.sh). Sourced; the script sets SCRIPT (its file name, for
# messages and its lock file) first.

log() { echo "$SCRIPT: $*" >&2; }
die() { log "error: $*"; exit 1; }

now_ms() { date +%s%3N; }

# Is PID a live process (a zombie is not: a server that was our child stays one
# until this script exits)?
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

is_root() { [ "$(id -u)" -eq 0 ]; }

# live_pid FILE: the pid FILE holds, if it names a live process.
live_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  echo "$pid"
}

# cmdline_has PID TEXT: whether PID's command line (arguments joined by spaces)
# contains TEXT; guards against a pid file whose pid was recycled.
cmdline_has() {
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"
}

# lock_dir DIR: takes DIR's lock (DIR/.$SCRIPT.lock, on descriptor 9) for the
# rest of the script, so that starts and stops from one DIR run one at a time.
lock_dir() {
  exec 9>"$1/.$SCRIPT.lock"
  flock 9
}

# free_port [N]: N (default 1) free TCP ports on 127.0.0.1, space-separated.
free_port() {
  python3 - "${1:-1}" <<'PY'
import random, socket, sys
# Below the kernel's ephemeral range: a port from it could be taken by any
# process binding port 0, or by an outgoing connection, before the server
# binds it.
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
if low - 1 - 10000 < 1000:
    sys.exit(f"the kernel's ephemeral ports start at {low}, too low to pick test ports below them "
             "(net.ipv4.ip_local_port_range)")
socks = []
for _ in range(int(sys.argv[1])):
    for attempt in range(1000):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", random.randint(10000, low - 1)))
            socks.append(s)
            break
        except OSError:
            s.close()
    else:
        sys.exit("no free port found below the kernel's ephemeral range after 1000 tries")
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
}

# The last 40 lines of FILE, if it has any, headed "last 40 lines of FILE WHAT:".
show_tail() {
  local file=$1 what=${2:-}
  if [ -s "$file" ]; then
    log "last 40 lines of $file${what:+ $what}:"
    tail -n 40 "$file" >&2
  fi
}

# stop DIR for a script that defines stop_locked DIR: under DIR's lock (the one
# start takes), and nothing to do when DIR does not exist. NOUN names the server.
stop_under_lock() {
  local dir=$1 noun=$2
  if [ ! -d "$dir" ]; then
    log "no $noun running from $dir"
    return 0
  fi
  dir=$(cd "$dir" && pwd -P)
  lock_dir "$dir"
  stop_locked "$dir"
}

# already_serving DIR FILE NOUN: for a script that defines running_pid DIR and
# stop_locked DIR. When the server of DIR runs and became ready (it wrote FILE,
# its address), prints FILE and succeeds; one that runs but never became ready
# is stopped. NOUN names the server. The caller holds DIR's lock.
already_serving() {
  local dir=$1 file=$2 noun=$3 pid
  if pid=$(running_pid "$dir") && [ -s "$file" ]; then
    log "$noun already running from $dir (pid $pid)"
    cat "$file"
    return 0
  fi
  if [ -n "${pid:-}" ]; then
    log "stopping a half-started $noun (pid $pid)"
    stop_locked "$dir"
  fi
  return 1
}

# wait_ready DIR PIDFILE LAUNCHER NOUN READY_CMD...: for a script that defines
# show_log_tail DIR. Runs READY_CMD every 0.2 s until it succeeds while the server
# runs, for at most START_DEADLINE_S, and sets SERVER_PID. The server is the
# process whose pid PIDFILE holds once written (launch_detached writes it), or
# with PIDFILE "" LAUNCHER itself. When the server exits, LAUNCHER ends without
# writing PIDFILE, or the deadline passes, it says so (NOUN names the server),
# shows DIR's logs and returns 1 (exited, or never launched) or 2 (deadline);
# the caller cleans up.
wait_ready() {
  local dir=$1 pidfile=$2 launcher=$3 noun=$4
  shift 4
  local deadline=$(( $(now_ms) + START_DEADLINE_S * 1000 ))
  SERVER_PID=""
  while :; do
    if [ -z "$pidfile" ]; then
      SERVER_PID=$launcher
    elif [ -s "$pidfile" ]; then
      SERVER_PID=$(cat "$pidfile")
    elif ! alive "$launcher" && [ ! -s "$pidfile" ]; then
      log "error: could not launch $noun"
      show_log_tail "$dir"
      return 1
    fi
    if [ -n "$SERVER_PID" ]; then
      if ! alive "$SERVER_PID"; then
        log "error: $noun exited during startup"
        show_log_tail "$dir"
        return 1
      fi
      "$@" && return 0
    fi
    if [ "$(now_ms)" -ge "$deadline" ]; then
      log "error: $noun did not become ready within ${START_DEADLINE_S} s"
      show_log_tail "$dir"
      return 2
    fi
    sleep 0.2
  done
}

# kept_port DIR: the port in DIR/port, or a free one written there, so that a
# restart from DIR keeps the server's address. Run in $(...): a DIR/port that
# holds no number fails it (|| exit 1 at the caller).
kept_port() {
  local dir=$1 port
  if [ -s "$dir/port" ]; then
    port=$(cat "$dir/port")
    [[ "$port" =~ ^[0-9]+$ ]] || die "$dir/port does not hold a port number; delete it"
    log "reusing port $port from $dir/port"
  else
    port=$(free_port) || die "could not find a free port"
    echo "$port" >"$dir/port"
  fi
  echo "$port"
}

# kill_server_locked DIR FILE...: for a script that defines running_pid DIR
# (the live server's pid): SIGKILLs that server, as a crash would, waits until
# it is gone and removes FILEs (its pid file, DIR/address, ...); nothing to
# kill when none runs. The caller holds DIR's lock.
kill_server_locked() {
  local dir=$1 pid
  shift
  if ! pid=$(running_pid "$dir"); then
    rm -f "$dir/address" "$@"
    log "no server running from $dir"
    return 0
  fi
  log "killing the server of $dir (pid $pid) with SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  local deadline=$(( $(now_ms) + STOP_DEADLINE_S * 1000 ))
  while alive "$pid"; do
    [ "$(now_ms)" -lt "$deadline" ] || die "server (pid $pid) still alive ${STOP_DEADLINE_S} s after SIGKILL"
    sleep 0.05
  done
  rm -f "$dir/address" "$@"
  log "server stopped"
}

# Code for `bash -c "$LAUNCHER_CODE" NAME PIDFILE CMD...`: closes every descriptor
# above 2 it inherited (this script's lock among them, and pipes of whoever runs
# this script), so that a server CMD starts holds none of them and nobody waits on
# it; writes its pid, the one CMD keeps, to PIDFILE unless that is ""; becomes CMD.
# shellcheck disable=SC2016
readonly LAUNCHER_CODE='
  for fd in /proc/$$/fd/*; do
    fd=${fd##*/}
    [ "$fd" -gt 2 ] && eval "exec $fd>&-"
  done 2>/dev/null
  [ -z "$1" ] || echo $$ >"$1"
  shift
  exec "$@"'

# without_inherited_fds CMD...: runs CMD with none of this shell's descriptors
# above 2 (LAUNCHER_CODE), in the foreground.
without_inherited_fds() {
  bash -c "$LAUNCHER_CODE" "${SCRIPT%.sh}-launcher" "" "$@"
}

# launch_detached OUT PIDFILE CMD...: starts CMD in the background in a
# session of its own (setsid + nohup), so that the server survives this script
# and CTest exiting; stdin is /dev/null, stdout and stderr go to OUT and every
# other inherited descriptor is closed (LAUNCHER_CODE). With a PIDFILE (not ""),
# the process writes its pid there before it becomes CMD. $! is the launched
# process afterwards.
launch_detached() {
  local out=$1 pidfile=$2
  shift 2
  setsid nohup bash -c "$LAUNCHER_CODE" "${SCRIPT%.sh}-launcher" "$pidfile" "$@" \
    </dev/null >"$out" 2>&1 &
}

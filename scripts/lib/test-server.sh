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
  exec 9>"$dir/.$SCRIPT.lock"
  flock 9
  stop_locked "$dir"
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
  log "killing server (pid $pid)"
  kill -KILL "$pid" 2>/dev/null || true
  local deadline=$(( $(now_ms) + STOP_DEADLINE_S * 1000 ))
  while alive "$pid"; do
    [ "$(now_ms)" -lt "$deadline" ] || die "server (pid $pid) still alive ${STOP_DEADLINE_S} s after SIGKILL"
    sleep 0.05
  done
  rm -f "$dir/address" "$@"
  log "server stopped"
}

# launch_detached OUT PIDFILE CMD...: starts CMD in the background in a
# session of its own (setsid + nohup), so that the server survives this script
# and CTest exiting; stdin is /dev/null, stdout and stderr go to OUT and every
# other inherited descriptor (this script's lock among them) is closed, so
# nobody waits on the server. With a PIDFILE (not ""), the process writes its
# pid there before it becomes CMD. $! is the launched process afterwards.
launch_detached() {
  local out=$1 pidfile=$2
  shift 2
  # shellcheck disable=SC2016
  setsid nohup bash -c '
      for fd in /proc/$$/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] && eval "exec $fd>&-"
      done 2>/dev/null
      [ -z "$1" ] || echo $$ >"$1"
      shift
      exec "$@"' "${SCRIPT%.sh}-launcher" "$pidfile" "$@" \
    </dev/null >"$out" 2>&1 &
}

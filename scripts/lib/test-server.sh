# Helpers of the scripts that run throw-away servers for tests (kafka.sh,
# redis.sh, postgres.sh). Sourced; the script sets SCRIPT (its file name, for
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

# A free TCP port on 127.0.0.1.
free_port() {
  python3 - <<'PY'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
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

#!/usr/bin/env bash
# A throw-away single-member etcd server for tests.
#
#   scripts/etcd.sh start DIR [--root-password PW] [--auth-token-ttl S] [--tls CA CERT KEY]
#                              start etcd with its data, log and pid in DIR, on 127.0.0.1
#                              and two free ports (client and peer; the ones in DIR/ports
#                              if an earlier start left them, so a restart keeps the
#                              address); prints "127.0.0.1:PORT" (the client endpoint, also
#                              written to DIR/address) as the last line on stdout.
#                              --root-password creates the user root with that password
#                              and enables authentication (the data dir keeps the users
#                              across restarts). --auth-token-ttl makes etcd forget an
#                              unused auth token after S seconds (default 300).
#                              --tls serves the client port over TLS with CERT and KEY
#                              and requires client certificates signed by CA.
#   scripts/etcd.sh stop DIR   kill the server started from DIR with SIGKILL (ok if none
#                              runs); the data dir stays
#   scripts/etcd.sh restart DIR
#                              stop, then start from the same data dir and ports
#
# Progress goes to stderr, prefixed "etcd.sh:"; stdout carries only the address.
# SIGKILL is the only stop: etcd's data dir is crash-safe, and a test that restarts
# the server wants a crash, not a clean shutdown.
#
# Environment:
#   WEIR_ETCD      etcd binary (default: etcd from PATH; Debian's etcd-server)
#   WEIR_ETCDCTL   etcdctl binary (default: etcdctl from PATH; Debian's etcd-client)
set -euo pipefail

ETCD="${WEIR_ETCD:-etcd}"
ETCDCTL="${WEIR_ETCDCTL:-etcdctl}"
START_DEADLINE_S=30
STOP_DEADLINE_S=30
export ETCDCTL_API=3

# etcdctl's TLS flags when --tls is given.
CTL_TLS=()
# etcd's client URL scheme and TLS flags.
SCHEME=http
ETCD_TLS=()

SCRIPT=etcd.sh
# shellcheck source=scripts/lib/test-server.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/test-server.sh"

usage() {
  echo "usage: $0 start DIR [--root-password PW] [--auth-token-ttl S] [--tls CA CERT KEY]" >&2
  echo "       $0 stop DIR" >&2
  echo "       $0 restart DIR" >&2
  exit 2
}

# ---------------------------------------------------------------------------- helpers

# The pid in DIR/etcd.pid if that process is alive and is the etcd of DIR.
running_pid() {
  local dir=$1 pid
  pid=$(live_pid "$dir/etcd.pid") || return 1
  cmdline_has "$pid" "--data-dir $dir/data" || return 1
  echo "$pid"
}

show_log_tail() { show_tail "$1/etcd.log"; }

# The client and peer ports of DIR (DIR/ports), picked once.
kept_ports() {
  local dir=$1 ports
  if [ -s "$dir/ports" ]; then
    ports=$(cat "$dir/ports")
    [[ "$ports" =~ ^[0-9]+\ [0-9]+$ ]] || die "$dir/ports does not hold two port numbers; delete it"
    log "reusing ports $ports from $dir/ports"
  else
    ports=$(free_port 2) || die "could not find free ports"
    echo "$ports" >"$dir/ports"
  fi
  echo "$ports"
}

# etcdctl against ENDPOINT, as root when DIR/root-password exists and auth is on.
ctl() {
  local dir=$1 endpoint=$2
  shift 2
  timeout 10 "$ETCDCTL" --endpoints="$endpoint" --command-timeout=3s "${CTL_TLS[@]}" "$@"
}

# Ready once the member serves a linearizable read (a Range through raft, which
# needs an elected member). Under auth the read is refused, but only after the
# member answered: "user name is empty" / "permission denied" count as ready.
health_ok() {
  local dir=$1 endpoint=$2 out
  out=$(ctl "$dir" "$endpoint" get /weir-ready-probe 2>&1) && return 0
  grep -qiE "user name is empty|permission denied|invalid auth token" <<<"$out"
}

# Creates the user root (role root) with DIR/root-password and enables auth;
# nothing to do when auth is on already (a restart).
enable_auth() {
  local dir=$1 endpoint=$2 pw
  pw=$(cat "$dir/root-password")
  # The data dir keeps users and the auth switch: a restart has nothing to do.
  [ -f "$dir/data/auth-enabled" ] && return 0
  ctl "$dir" "$endpoint" user add "root:$pw" >/dev/null || die "could not add the user root"
  ctl "$dir" "$endpoint" user grant-role root root >/dev/null || die "could not grant the role root"
  ctl "$dir" "$endpoint" auth enable >/dev/null || die "could not enable authentication"
  touch "$dir/data/auth-enabled"
  log "authentication enabled (user root, password in $dir/root-password)"
}

# ---------------------------------------------------------------------------- start

start() {
  local dir=$1 password_given=$2 password=$3 token_ttl=${4:-300}
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd -P)
  lock_dir "$dir"
  already_serving "$dir" "$dir/address" etcd && return 0

  command -v "$ETCD" >/dev/null || die "$ETCD not found (scripts/install-deps.sh installs etcd-server)"
  command -v "$ETCDCTL" >/dev/null || die "$ETCDCTL not found (scripts/install-deps.sh installs etcd-client)"
  if [ "$password_given" = 1 ]; then
    [ -n "$password" ] || die "--root-password must not be empty"
    (umask 077 && printf '%s' "$password" >"$dir/root-password")
  fi

  local started ports client peer
  started=$(now_ms)
  ports=$(kept_ports "$dir") || exit 1
  client=${ports% *}
  peer=${ports#* }

  rm -f "$dir/address" "$dir/etcd.pid"
  [ -f "$dir/etcd.log" ] && mv -f "$dir/etcd.log" "$dir/etcd.log.prev"

  log "starting etcd on 127.0.0.1:$client (peer port $peer, data in $dir/data)"
  launch_detached "$dir/etcd.log" "$dir/etcd.pid" "$ETCD" \
    --name weir-test --data-dir "$dir/data" \
    --listen-client-urls "$SCHEME://127.0.0.1:$client" --advertise-client-urls "$SCHEME://127.0.0.1:$client" \
    "${ETCD_TLS[@]}" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "weir-test=http://127.0.0.1:$peer" --initial-cluster-state new \
    --auth-token-ttl "$token_ttl" --logger zap --log-level warn
  local launcher=$! rc=0
  wait_ready "$dir" "$dir/etcd.pid" "$launcher" "etcd" health_ok "$dir" "127.0.0.1:$client" || rc=$?
  if [ "$rc" = 1 ]; then
    rm -f "$dir/etcd.pid"
    if grep -q "address already in use" "$dir/etcd.log" 2>/dev/null; then
      log "a port of $ports is taken by another process; delete $dir/ports to start on new ones"
    fi
    exit 1
  fi
  if [ "$rc" = 2 ]; then stop_locked "$dir"; exit 1; fi
  local pid=$SERVER_PID
  if [ -f "$dir/root-password" ]; then enable_auth "$dir" "127.0.0.1:$client"; fi

  echo "127.0.0.1:$client" >"$dir/address"
  log "etcd ready (pid $pid) after $(( $(now_ms) - started )) ms; log: $dir/etcd.log"
  echo "127.0.0.1:$client"
}

# ---------------------------------------------------------------------------- stop

stop_locked() {
  local dir=$1
  kill_server_locked "$dir" "$dir/etcd.pid"
}

stop() { stop_under_lock "$1" etcd; }

# ---------------------------------------------------------------------------- main

[ $# -ge 1 ] || usage
case "$1" in
  start)
    [ $# -ge 2 ] || usage
    dir=$2
    shift 2
    password_given=0
    password=""
    token_ttl=300
    while [ $# -gt 0 ]; do
      case "$1" in
        --root-password) [ $# -ge 2 ] || usage; password_given=1; password=$2; shift 2 ;;
        --root-password=*) password_given=1; password=${1#--root-password=}; shift ;;
        --auth-token-ttl) [ $# -ge 2 ] || usage; token_ttl=$2; shift 2 ;;
        --tls)
          [ $# -ge 4 ] || usage
          for f in "$2" "$3" "$4"; do [ -r "$f" ] || die "--tls: cannot read $f"; done
          SCHEME=https
          ETCD_TLS=(--trusted-ca-file "$2" --cert-file "$3" --key-file "$4" --client-cert-auth)
          CTL_TLS=(--cacert "$2" --cert "$3" --key "$4")
          shift 4
          ;;
        *) usage ;;
      esac
    done
    [[ "$token_ttl" =~ ^[1-9][0-9]*$ ]] || die "--auth-token-ttl takes whole seconds, not '$token_ttl'"
    start "$dir" "$password_given" "$password" "$token_ttl"
    ;;
  stop) [ $# -eq 2 ] || usage; stop "$2" ;;
  restart)
    [ $# -eq 2 ] || usage
    # Each half takes DIR's lock itself; the subshells drop it in between.
    ( stop "$2" )
    ( start "$2" 0 "" )
    ;;
  *) usage ;;
esac

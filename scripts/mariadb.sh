#!/usr/bin/env bash
# A throw-away MariaDB server for tests.
#
#   scripts/mariadb.sh start DIR
#                              start a server whose data directory (DIR/data), socket
#                              (DIR/mariadb.sock), pid and log (DIR/mariadb.log) live in DIR,
#                              on 127.0.0.1 and a free port (kept in DIR/port, so a restart
#                              keeps the address and the data). The first start creates the
#                              data directory (mariadb-install-db), user weir and database
#                              weir; weir's password is in DIR/password (a file the sink can
#                              read, never on a command line). Prints "127.0.0.1:PORT" (also
#                              written to DIR/address) as the last line on stdout.
#   scripts/mariadb.sh stop DIR
#                              kill the server started from DIR (SIGKILL, as a crash would;
#                              InnoDB recovers at the next start; ok if none runs)
#   scripts/mariadb.sh client DIR [mariadb args...]
#                              the mariadb client connected to that server as weir, database weir
#
# Progress goes to stderr, prefixed "mariadb.sh:"; stdout carries only the address.
#
# mariadbd refuses to run as root unless told to: run as root, this script passes
# --user=root (the data directory is root's); otherwise the server runs as the caller.
#
# Environment:
#   WEIR_MARIADBD        the server binary (default: mariadbd from PATH or /usr/sbin)
#   WEIR_MARIADB_CLIENT  the client binary (default: mariadb from PATH)
set -euo pipefail

MARIADBD="${WEIR_MARIADBD:-$(command -v mariadbd || echo /usr/sbin/mariadbd)}"
CLIENT="${WEIR_MARIADB_CLIENT:-mariadb}"
readonly USER_NAME=weir DATABASE=weir
START_DEADLINE_S=60
STOP_DEADLINE_S=30

SCRIPT=mariadb.sh
# shellcheck source=scripts/lib/test-server.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/test-server.sh"

usage() {
  cat >&2 <<EOF
usage: $0 start DIR
       $0 stop DIR
       $0 client DIR [mariadb args...]
EOF
  exit 2
}

# ---------------------------------------------------------------------------- helpers

# The pid in DIR/mariadb.pid if that process is alive and is the server of DIR.
running_pid() {
  local dir=$1 pid
  pid=$(live_pid "$dir/mariadb.pid") || return 1
  cmdline_has "$pid" "--datadir=$dir/data" || return 1
  echo "$pid"
}

# The client as the server's root over its socket (unix_socket authentication
# for root when we are root; the caller's own name otherwise).
admin_client() {
  local dir=$1
  shift
  local user=root
  is_root || user=$(id -un)
  "$CLIENT" --no-defaults --protocol=socket --socket="$dir/mariadb.sock" --user="$user" "$@"
}

ready() { admin_client "$1" --connect-timeout=2 -e 'SELECT 1' >/dev/null 2>&1; }

show_log_tail() {
  show_tail "$1/mariadb.log"
  show_tail "$1/mariadb.out" "(server stdout/stderr)"
}

# ---------------------------------------------------------------------------- start

start() {
  local dir=$1
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd -P)
  case "$dir" in
    *[\"\'\`\$\\\ ]*|*$'\n'*) die "DIR must not contain quotes, \`, \$, \\, spaces or line breaks: $dir" ;;
  esac
  # A Unix socket path has at most 107 bytes.
  [ ${#dir} -le 90 ] || die "DIR is too long for a Unix socket path below it (${#dir} > 90 characters): $dir"
  lock_dir "$dir"
  already_serving "$dir" "$dir/address" server && return 0

  [ -x "$MARIADBD" ] || die "$MARIADBD not found (scripts/install-deps.sh installs mariadb-server)"
  command -v "$CLIENT" >/dev/null || die "$CLIENT not found (scripts/install-deps.sh installs mariadb-server)"
  command -v mariadb-install-db >/dev/null || die "mariadb-install-db not found (install mariadb-server)"

  local run_as=()
  is_root && run_as=(--user=root)

  local fresh=0
  if [ ! -d "$dir/data/mysql" ]; then
    fresh=1
    rm -rf "$dir/data"
    log "creating the data directory $dir/data"
    mariadb-install-db --no-defaults --datadir="$dir/data" "${run_as[@]}" --auth-root-authentication-method=socket \
      --skip-test-db >"$dir/install.log" 2>&1 || { show_tail "$dir/install.log"; die "mariadb-install-db failed"; }
    (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$dir/password")
  fi

  local started port
  started=$(now_ms)
  port=$(kept_port "$dir") || exit 1

  rm -f "$dir/address" "$dir/mariadb.pid"
  [ -f "$dir/mariadb.log" ] && mv -f "$dir/mariadb.log" "$dir/mariadb.log.prev"
  rm -f "$dir/mariadb.out"

  log "starting mariadbd on 127.0.0.1:$port"
  # Small buffers: several servers share a test machine.
  launch_detached "$dir/mariadb.out" "" \
    "$MARIADBD" --no-defaults --datadir="$dir/data" "${run_as[@]}" --bind-address=127.0.0.1 --port="$port" \
    --socket="$dir/mariadb.sock" --pid-file="$dir/mariadb.pid" --log-error="$dir/mariadb.log" \
    --innodb-buffer-pool-size=32M --innodb-log-file-size=16M --skip-name-resolve --max-connections=200 \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_bin
  # The launcher execs mariadbd: its pid is the server's.
  local launcher=$! rc=0
  wait_ready "$dir" "" "$launcher" "the server" ready "$dir" || rc=$?
  if [ "$rc" = 1 ] && grep -q "Address already in use\|Do you already have another" "$dir/mariadb.log" 2>/dev/null; then
    log "port $port is taken by another process; delete $dir/port to start on a new one"
  fi
  if [ "$rc" = 2 ]; then kill -KILL "$launcher" 2>/dev/null || true; fi
  [ "$rc" = 0 ] || exit 1

  if [ "$fresh" = 1 ]; then
    log "creating user $USER_NAME and database $DATABASE"
    local password
    password=$(cat "$dir/password")
    # The password goes through stdin, not the command line.
    admin_client "$dir" <<SQL || die "could not create user $USER_NAME"
CREATE DATABASE IF NOT EXISTS $DATABASE;
CREATE USER IF NOT EXISTS '$USER_NAME'@'127.0.0.1' IDENTIFIED BY '$password';
CREATE USER IF NOT EXISTS '$USER_NAME'@'localhost' IDENTIFIED BY '$password';
GRANT ALL ON $DATABASE.* TO '$USER_NAME'@'127.0.0.1';
GRANT ALL ON $DATABASE.* TO '$USER_NAME'@'localhost';
GRANT PROCESS, CONNECTION ADMIN ON *.* TO '$USER_NAME'@'127.0.0.1';
SQL
  fi

  local pid
  pid=$(cat "$dir/mariadb.pid")
  echo "127.0.0.1:$port" >"$dir/address"
  log "server ready (pid $pid) after $(( $(now_ms) - started )) ms; log: $dir/mariadb.log"
  echo "127.0.0.1:$port"
}

# ---------------------------------------------------------------------------- stop

stop_locked() {
  local dir=$1
  kill_server_locked "$dir" "$dir/mariadb.pid" "$dir/mariadb.sock"
}

stop() { stop_under_lock "$1" server; }

# ---------------------------------------------------------------------------- client

client() {
  local dir
  dir=$(cd "$1" && pwd -P)
  shift
  [ -s "$dir/port" ] || die "no server was started from $dir"
  MYSQL_PWD=$(cat "$dir/password") exec "$CLIENT" --no-defaults --host=127.0.0.1 --port="$(cat "$dir/port")" \
    --user="$USER_NAME" "$DATABASE" "$@"
}

# ---------------------------------------------------------------------------- main

[ $# -ge 1 ] || usage
case "$1" in
  start) [ $# -eq 2 ] || usage; start "$2" ;;
  stop) [ $# -eq 2 ] || usage; stop "$2" ;;
  client) [ $# -ge 2 ] || usage; dir=$2; shift 2; client "$dir" "$@" ;;
  *) usage ;;
esac

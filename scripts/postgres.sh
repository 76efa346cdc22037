#!/usr/bin/env bash
# A throw-away PostgreSQL 15 server for tests.
#
#   scripts/postgres.sh start DIR [--max-prepared-transactions N]
#                              start a server whose cluster (DIR/pgdata), socket
#                              directory (DIR/socket) and log (DIR/postgres.log) live in
#                              DIR, on 127.0.0.1 and a free port (kept in DIR/port, so a
#                              restart keeps the address and the data). The first start
#                              creates the cluster, role weir (password weir) and database
#                              weir. N defaults to 64 on the first start and to the last
#                              value given afterwards. Prints the libpq conninfo (also
#                              written to DIR/conninfo) as the last line on stdout.
#   scripts/postgres.sh stop DIR
#                              stop the server started from DIR (pg_ctl stop -m immediate;
#                              ok if none runs)
#   scripts/postgres.sh psql DIR [psql args...]
#                              psql connected to that server as role weir, database weir
#
# Progress goes to stderr, prefixed "postgres.sh:"; stdout carries only the conninfo.
#
# initdb and pg_ctl refuse to run as root. Run as root, this script runs them as the
# system user weir-test (created if missing), which owns DIR/pgdata, DIR/socket and
# DIR/postgres.log; every directory above DIR must let that user through.
#
# Environment:
#   WEIR_PG_BIN  PostgreSQL's bin directory (default /usr/lib/postgresql/15/bin)
set -euo pipefail

PG_BIN="${WEIR_PG_BIN:-/usr/lib/postgresql/15/bin}"
readonly TEST_USER=weir-test
readonly ROLE=weir PASSWORD=weir DATABASE=weir
readonly DEFAULT_MAX_PREPARED_TRANSACTIONS=64
START_DEADLINE_S=60
STOP_DEADLINE_S=30

SCRIPT=postgres.sh
# shellcheck source=scripts/lib/test-server.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/test-server.sh"

usage() {
  cat >&2 <<EOF
usage: $0 start DIR [--max-prepared-transactions N]
       $0 stop DIR
       $0 psql DIR [psql args...]
EOF
  exit 2
}


# ---------------------------------------------------------------------------- helpers

# The prefix that runs a command as the user owning the cluster: weir-test when we are
# root, else us.
AS_PG=()
if is_root; then AS_PG=(runuser -u "$TEST_USER" --); fi

# Runs a command as the cluster's user, from / so that its working directory is
# accessible to it.
as_pg() { (cd / && "${AS_PG[@]}" "$@"); }

# as_pg with every descriptor above 2 closed, so that a server the command starts
# holds neither this script's lock nor a pipe of whoever runs this script.
as_pg_without_inherited_fds() { (cd / && without_inherited_fds "${AS_PG[@]}" "$@"); }

ensure_user() {
  id -u "$TEST_USER" >/dev/null 2>&1 && return 0
  log "creating system user $TEST_USER (initdb and pg_ctl refuse to run as root)"
  # A concurrent start may have created it meanwhile: only its absence is an error.
  useradd --system --no-create-home --shell /usr/sbin/nologin "$TEST_USER" >&2 \
    || id -u "$TEST_USER" >/dev/null 2>&1 \
    || die "could not create system user $TEST_USER"
}

# Dies unless the cluster's user can enter every directory from / down to DIR, which
# is made accessible itself if need be (it is the test's own directory; its parents
# are not, so those are only reported).
check_access() {
  local dir=$1 p="" ancestors=(/) parts part blocked
  IFS=/ read -ra parts <<<"${dir#/}"
  for part in "${parts[@]}"; do
    p="$p/$part"
    ancestors+=("$p")
  done
  # shellcheck disable=SC2016
  blocked=$(runuser -u "$TEST_USER" -- /bin/sh -c \
    'for p in "$@"; do test -x "$p" || { echo "$p"; exit 0; }; done' sh "${ancestors[@]}")
  if [ "$blocked" = "$dir" ]; then
    log "making $dir accessible to $TEST_USER (chmod go+rx)"
    chmod go+rx "$dir"
    runuser -u "$TEST_USER" -- test -x "$dir" \
      || die "$TEST_USER still cannot enter $dir after chmod go+rx (an ACL?); choose another DIR"
  elif [ -n "$blocked" ]; then
    die "user $TEST_USER cannot enter $blocked ($(stat -c '%A %U:%G' "$blocked")), a parent of $dir;" \
        "make it traversable (e.g. chmod o+x $blocked) or choose another DIR"
  fi
}

# pg_ctl hands paths to a shell in double quotes, and libpq reads a comma in host= as a
# list of hosts (DIR/socket is one).
check_dir_name() {
  case "$1" in
    *[\"\'\`\$\\,]*|*$'\n'*) die "DIR must not contain quotes, \`, \$, \\, commas or line breaks: $1" ;;
  esac
}

running() { as_pg "$PG_BIN/pg_ctl" status -D "$1/pgdata" >/dev/null 2>&1; }

# psql as the bootstrap superuser over the Unix socket (trust).
admin_psql() {
  local dir=$1 port
  shift
  port=$(cat "$dir/port")
  as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir/socket" -p "$port" -U postgres -d postgres "$@"
}

show_log_tail() { show_tail "$1/postgres.log"; }

conninfo_of() { echo "host=127.0.0.1 port=$1 user=$ROLE password=$PASSWORD dbname=$DATABASE"; }

# The value in the generated config of an earlier start, if any.
previous_max_prepared_transactions() {
  sed -n 's/^max_prepared_transactions = \([0-9]\+\)$/\1/p' "$1/pgdata/weir-test.conf" 2>/dev/null | tail -n 1 || true
}

write_config() {
  local dir=$1 port=$2 mpt=$3
  cat >"$dir/pgdata/weir-test.conf.tmp" <<EOF
# Generated by weir scripts/postgres.sh on every start (included by postgresql.conf).
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir/socket'
max_prepared_transactions = $mpt
# A test server: speed over durability against an OS crash.
fsync = off
full_page_writes = off
# synchronous_commit stays on: with fsync off a commit only writes its WAL to the page
# cache, and off would lose the last commits to pg_ctl stop -m immediate or a kill.
synchronous_commit = on
EOF
  mv -f "$dir/pgdata/weir-test.conf.tmp" "$dir/pgdata/weir-test.conf"
  if is_root; then chown "$TEST_USER:" "$dir/pgdata/weir-test.conf"; fi
}

# Creates (or hands to the cluster's user) DIR/NAME: a directory with MODE, or with
# MODE "file" an empty file.
own() {
  local path=$1 mode=$2
  if [ "$mode" = file ]; then
    [ -e "$path" ] || : >"$path"
  else
    mkdir -p "$path"
    chmod "$mode" "$path"
  fi
  if is_root && [ "$(stat -c %U "$path")" != "$TEST_USER" ]; then
    chown -R "$TEST_USER:" "$path"
  fi
}

# ---------------------------------------------------------------------------- start

# Gives up on a server that started but is not usable.
fail_started() {
  local dir=$1
  log "error: $2"
  show_log_tail "$dir"
  stop_locked "$dir"
  exit 1
}

start() {
  local dir=$1 mpt=$2
  [ -x "$PG_BIN/initdb" ] || die "no PostgreSQL in $PG_BIN (scripts/install-deps.sh installs postgresql; or set WEIR_PG_BIN)"
  check_dir_name "$dir"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd -P)
  check_dir_name "$dir"
  if is_root; then
    ensure_user
    check_access "$dir"
  fi
  lock_dir "$dir"

  local started port
  started=$(now_ms)
  port=$(kept_port "$dir") || exit 1
  local socket="$dir/socket/.s.PGSQL.$port"
  [ "$(LC_ALL=C; echo "${#socket}")" -le 107 ] \
    || die "the socket path $socket is longer than 107 bytes, the limit of Unix sockets; choose a shorter DIR"

  if [ -f "$dir/pgdata/PG_VERSION" ] && running "$dir"; then
    if [ -s "$dir/conninfo" ]; then
      local current
      current=$(admin_psql "$dir" -At -c 'SHOW max_prepared_transactions') \
        || die "a server runs from $dir but does not answer on $dir/socket; stop it first"
      if [ -n "$mpt" ] && [ "$mpt" != "$current" ]; then
        die "a server already runs from $dir with max_prepared_transactions = $current; stop it first to use $mpt"
      fi
      log "server already running from $dir"
      cat "$dir/conninfo"
      return 0
    fi
    # Running but never became ready (no conninfo): start over.
    log "stopping a half-started server"
    stop_locked "$dir"
  fi
  rm -f "$dir/conninfo"

  if [ ! -f "$dir/pgdata/PG_VERSION" ]; then
    # initdb into a scratch directory renamed when complete: a cluster that exists is
    # a whole one.
    rm -rf "$dir/pgdata" "$dir/pgdata.new"
    own "$dir/pgdata.new" 700
    log "initdb $dir/pgdata"
    as_pg "$PG_BIN/initdb" -D "$dir/pgdata.new" -U postgres -E UTF8 --locale=C \
      --auth-local=trust --auth-host=scram-sha-256 --no-sync --no-instructions >"$dir/initdb.log" 2>&1 \
      || { tail -n 40 "$dir/initdb.log" >&2; die "initdb failed (output in $dir/initdb.log)"; }
    echo "include 'weir-test.conf'" >>"$dir/pgdata.new/postgresql.conf"
    mv "$dir/pgdata.new" "$dir/pgdata"
  fi
  own "$dir/pgdata" 700
  own "$dir/socket" 700
  own "$dir/postgres.log" file

  [ -n "$mpt" ] || mpt=$(previous_max_prepared_transactions "$dir")
  [ -n "$mpt" ] || mpt=$DEFAULT_MAX_PREPARED_TRANSACTIONS
  write_config "$dir" "$port" "$mpt"

  log "starting postgres on 127.0.0.1:$port (max_prepared_transactions = $mpt)"
  echo "---- $(date '+%F %T') postgres.sh start" >>"$dir/postgres.log"
  # pg_ctl detaches the server into its own session, stdio on DIR/postgres.log.
  if ! as_pg_without_inherited_fds "$PG_BIN/pg_ctl" start -D "$dir/pgdata" -l "$dir/postgres.log" \
      -w -t "$START_DEADLINE_S" -s >&2; then
    log "error: pg_ctl start failed (the server exited, or was not ready within ${START_DEADLINE_S} s)"
    show_log_tail "$dir"
    if grep -q "could not bind IPv4 address" "$dir/postgres.log" 2>/dev/null; then
      log "port $port may be taken by another process; delete $dir/port to start on a new one"
    fi
    stop_locked "$dir"
    exit 1
  fi

  # Role and database (first start, or one interrupted before they were made).
  admin_psql "$dir" -f - >&2 <<EOF || fail_started "$dir" "could not create role $ROLE and database $DATABASE"
SELECT 'CREATE ROLE $ROLE LOGIN PASSWORD ''$PASSWORD''' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') \gexec
SELECT 'CREATE DATABASE $DATABASE OWNER $ROLE' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DATABASE') \gexec
EOF

  # What a test will do: log in over TCP with the password.
  local conninfo
  conninfo=$(conninfo_of "$port")
  "$PG_BIN/psql" -X -q -At -c 'SELECT 1' "$conninfo" >/dev/null \
    || fail_started "$dir" "cannot log in as $ROLE over TCP on 127.0.0.1:$port"

  echo "$conninfo" >"$dir/conninfo"
  log "server ready after $(( $(now_ms) - started )) ms; log: $dir/postgres.log"
  echo "$conninfo"
}

# ---------------------------------------------------------------------------- stop

stop_locked() {
  local dir=$1
  if [ ! -f "$dir/pgdata/PG_VERSION" ] || ! running "$dir"; then
    rm -f "$dir/conninfo"
    log "no server running from $dir"
    return 0
  fi
  log "stopping server (pg_ctl stop -m immediate)"
  if ! as_pg "$PG_BIN/pg_ctl" stop -D "$dir/pgdata" -m immediate -w -t "$STOP_DEADLINE_S" -s >&2; then
    local pid
    pid=$(head -n 1 "$dir/pgdata/postmaster.pid" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] || die "pg_ctl stop failed and $dir/pgdata/postmaster.pid names no process"
    log "pg_ctl stop failed; killing the postmaster (pid $pid)"
    kill -KILL "$pid" 2>/dev/null || true
    local deadline=$(( $(now_ms) + STOP_DEADLINE_S * 1000 ))
    while kill -0 "$pid" 2>/dev/null; do
      [ "$(now_ms)" -lt "$deadline" ] || die "postmaster (pid $pid) still alive ${STOP_DEADLINE_S} s after SIGKILL"
      sleep 0.1
    done
  fi
  rm -f "$dir/conninfo"
  log "server stopped"
}

stop() {
  if is_root && ! id -u "$TEST_USER" >/dev/null 2>&1; then
    log "no server running from $1 (there is no user $TEST_USER)"
    return 0
  fi
  stop_under_lock "$1" server
}

# ---------------------------------------------------------------------------- psql

psql_cmd() {
  local dir=$1
  shift
  [ -s "$dir/port" ] || die "no server was started from $dir (no $dir/port)"
  PGHOST=127.0.0.1 PGPORT=$(cat "$dir/port") PGUSER=$ROLE PGPASSWORD=$PASSWORD PGDATABASE=$DATABASE \
    exec "$PG_BIN/psql" "$@"
}

# ---------------------------------------------------------------------------- main

[ $# -ge 1 ] || usage
case "$1" in
  start)
    [ $# -ge 2 ] || usage
    dir=$2
    shift 2
    mpt=""
    while [ $# -gt 0 ]; do
      case "$1" in
        --max-prepared-transactions) [ $# -ge 2 ] || usage; mpt=$2; shift 2 ;;
        --max-prepared-transactions=*) mpt=${1#*=}; shift ;;
        *) usage ;;
      esac
    done
    if [ -n "$mpt" ]; then
      [[ "$mpt" =~ ^[0-9]+$ ]] || die "--max-prepared-transactions takes a number >= 0, not '$mpt'"
      mpt=$((10#$mpt))
    fi
    start "$dir" "$mpt"
    ;;
  stop) [ $# -eq 2 ] || usage; stop "$2" ;;
  psql) [ $# -ge 2 ] || usage; dir=$2; shift 2; psql_cmd "$dir" "$@" ;;
  *) usage ;;
esac

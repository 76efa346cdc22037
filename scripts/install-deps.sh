#!/usr/bin/env bash
# Installs everything Weir needs to build and test on Debian 12, from Debian's
# packages only. Idempotent: packages already present are left as they are.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librdkafka-dev librocksdb-dev libabsl-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev googletest nlohmann-json3-dev libssl-dev
  # The daemons' HTTP endpoints and Prometheus metrics.
  libcpp-httplib-dev prometheus-cpp-dev
  # sd_notify for Type=notify units; systemd-analyze checks the unit files.
  libsystemd-dev systemd
  # The S3 client of common/fs.
  libcurl4-openssl-dev
  # The configuration file's YAML.
  libyaml-cpp-dev
  # The test Kafka broker: a JRE and Maven to fetch Kafka from Maven Central.
  openjdk-17-jre-headless maven
  # The Redis, PostgreSQL and MySQL sinks (hiredis, libpq, libmariadb) and the throw-away
  # servers their tests start.
  redis-server libhiredis-dev postgresql libpq-dev mariadb-server libmariadb-dev
  # Used by the test and demo scripts.
  python3 python3-yaml procps curl
  # The throw-away etcd of the leader-election tests (scripts/etcd.sh); its
  # packaged service is kept from starting (see below).
  etcd-server etcd-client
  # Makes the certificates of the TLS tests.
  openssl
  # libFuzzer for the fuzz targets (scripts/fuzz.sh).
  clang-14 libclang-rt-14-dev
)
# Renders the Kubernetes manifests in tests/kubernetes (any kubectl will do).
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq

# etcd-server's maintainer scripts enable and start a system-wide etcd on
# 127.0.0.1:2379. The tests start their own (scripts/etcd.sh), so etcd-server
# is installed on its own with a policy-rc.d that refuses every start (an
# existing one, as containers have, is kept), and its unit is disabled
# afterwards. The other packages install as usual.
others=()
with_etcd=0
for p in "${missing[@]}"; do
  if [ "$p" = etcd-server ]; then with_etcd=1; else others+=("$p"); fi
done
if [ ${#others[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${others[@]}"
fi
if [ "$with_etcd" = 1 ]; then
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# Left by weir scripts/install-deps.sh during an install.\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    own_policy=1
    trap '$SUDO rm -f "$policy"' EXIT
  fi
  $SUDO apt-get install -y -qq --no-install-recommends etcd-server
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now etcd.service >/dev/null 2>&1 || true
  fi
  if [ "$own_policy" = 1 ]; then
    $SUDO rm -f "$policy"
    trap - EXIT
  fi
fi

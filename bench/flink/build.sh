#!/usr/bin/env bash
# Builds the Flink side of bench/run.sh checkpoint --flink and nexmark --flink:
# the keyed_count and Nexmark jobs on Apache Flink (Maven Central), and
# target/classpath.txt to run them with.
set -euo pipefail
cd "$(dirname "$0")"
command -v mvn >/dev/null || { echo "bench/flink: needs Maven and a JDK 17 (apt-get install maven openjdk-17-jdk-headless)" >&2; exit 1; }
mvn -q -B package -DskipTests >&2
echo "$PWD/target/classes:$(cat target/classpath.txt)"

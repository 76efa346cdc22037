#!/usr/bin/env bash
# With WEIR_STATIC_GRPC, gRPC, protobuf and Abseil are inside the binaries
# (cmake/WeirStaticDependencies.cmake). None of them may also arrive as a
# shared library — through a dependency that links them (re2 releases from
# 2023 on link Abseil, for one): a process would then hold two copies, with
# two sets of globals. Fails naming the binary and the library.
#   static_dependencies_test.sh BIN_DIR
set -euo pipefail
bin=$1
status=0
for binary in weir weir-jobmanager weir-taskmanager; do
  shared=$(ldd "$bin/$binary" | awk '{print $1}' | grep -E '^lib(absl_|protobuf|grpc|gpr|upb|address_sorting)' || true)
  if [ -n "$shared" ]; then
    echo "static_dependencies_test: $binary links these statically and loads them as shared libraries too:" $shared >&2
    echo "  (a shared library it needs links them; configure with -DWEIR_STATIC_GRPC=OFF on this system)" >&2
    status=1
  else
    echo "static_dependencies_test: $binary: no shared gRPC, protobuf or Abseil"
  fi
done
exit $status

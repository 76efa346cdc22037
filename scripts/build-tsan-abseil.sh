#!/usr/bin/env bash
# Builds Debian 12's Abseil — the same source, Debian's patches and options,
# the same sonames — with ThreadSanitizer and clang (the compiler of the TSan
# build of Weir: one TSan runtime per process), into
# ~/.cache/weir/abseil-tsan-clang-<version>/lib, and prints that directory.
#
# Why: Weir guards its shared state with absl::Mutex, whose code lives in
# Debian's libabsl_synchronization.so, built without TSan. TSan cannot see
# those locks and reports every access they guard as a race. A TSan build
# of Weir (cmake -DWEIR_TSAN=ON) runs its tests with
# LD_LIBRARY_PATH pointing here, so that the one Abseil in the process is
# instrumented. scripts/test-tsan.sh does all of it.
#
# The sources come from Debian's archive (deb.debian.org), checked against
# the hashes of Debian's source package. Idempotent: a finished build is
# reused.
set -euo pipefail

version=20220623.1
revision=1+deb12u2
orig=abseil_${version}.orig.tar.gz
orig_sha256=abfe2897f3a30edaa74bc34365afe3c2a3cd012091a97dc7e008f7016adcd5fe
patches=abseil_${version}-${revision}.debian.tar.xz
patches_sha256=e08490fc7b6f3beca1925953b0c4fb92df2de5e2a01295e4641e2a3d4e528eeb
archive=http://deb.debian.org/debian/pool/main/a/abseil

installed=$(dpkg-query -W -f='${Version}' libabsl-dev 2>/dev/null || true)
case "$installed" in
  "${version}"-*) ;;
  *)
    echo "build-tsan-abseil: libabsl-dev is ${installed:-not installed}; this script builds Abseil ${version} (Debian 12's)." >&2
    echo "build-tsan-abseil: run scripts/install-deps.sh, or update the version and hashes here to match." >&2
    exit 2 ;;
esac
if [ "$installed" != "${version}-${revision}" ]; then
  # A later Debian revision of the same upstream version (a security fix)
  # keeps the ABI; the options.h check below makes sure of the rest.
  echo "build-tsan-abseil: note: libabsl-dev is $installed; building ${version}-${revision} (same ABI)" >&2
fi

cache=${WEIR_CACHE_DIR:-$HOME/.cache/weir}
out=$cache/abseil-tsan-clang-${version}-${revision}
if [ -f "$out/.complete" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$cache/downloads"
fetch() {  # fetch FILE SHA256
  local file=$1 sum=$2 path=$cache/downloads/$1
  if [ ! -f "$path" ] || ! echo "$sum  $path" | sha256sum -c --quiet - 2>/dev/null; then
    echo "build-tsan-abseil: downloading $archive/$file" >&2
    if ! curl -fsSL --retry 3 -o "$path.part" "$archive/$file"; then
      echo "build-tsan-abseil: cannot download $archive/$file (Debian may have replaced it with a newer" >&2
      echo "build-tsan-abseil: revision): update the revision and hashes here from the .dsc next to it" >&2
      exit 1
    fi
    echo "$sum  $path.part" | sha256sum -c --quiet - || {
      echo "build-tsan-abseil: $file does not have the hash of Debian's source package" >&2
      exit 1
    }
    mv "$path.part" "$path"
  fi
}
fetch "$orig" "$orig_sha256"
fetch "$patches" "$patches_sha256"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xzf "$cache/downloads/$orig"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -1)
tar -C "$src" -xJf "$cache/downloads/$patches"
while read -r patch; do
  case "$patch" in ''|'#'*) continue ;; esac
  patch -s -d "$src" -p1 < "$src/debian/patches/$patch"
done < "$src/debian/patches/series"

echo "build-tsan-abseil: building Abseil ${version} with -fsanitize=thread (a few minutes)" >&2
CC=clang-14 CXX=clang++-14 cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_STANDARD=17 \
  -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF -DCMAKE_C_FLAGS=-fsanitize=thread -DCMAKE_CXX_FLAGS=-fsanitize=thread \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DCMAKE_INSTALL_PREFIX="$out" -DCMAKE_INSTALL_LIBDIR=lib >/dev/null
ninja -C "$work/build" install >/dev/null
# The same options as Debian's headers, or the libraries would not match them.
if ! cmp -s "$out/include/absl/base/options.h" /usr/include/absl/base/options.h; then
  echo "build-tsan-abseil: the built options.h differs from Debian's /usr/include/absl/base/options.h" >&2
  exit 1
fi
touch "$out/.complete"
echo "$out"

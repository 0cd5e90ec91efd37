#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs what a fresh Debian/Ubuntu machine lacks (as root, or through
# sudo), then configures and builds lazyattn into ./build. libhiredis-dev
# gives the Redis document store (the library builds without it); libb2-dev
# (BLAKE2b, the document digests) and libxxhash-dev (XXH3, the export
# checksum) and libpcre2-dev (the tokenizer's pre-tokenizer regexes) are
# required.
# Usage: sh tools/bootstrap.sh [extra meson setup options]
set -eu
cd "$(dirname "$0")/.."

packages="gcc pkg-config python3 meson ninja-build ocl-icd-libopencl1 ocl-icd-opencl-dev
opencl-c-headers pocl-opencl-icd libclblast-dev libcmocka-dev libhiredis-dev libb2-dev libxxhash-dev libpcre2-dev"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "bootstrap: installing$missing"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi

if [ -f build/build.ninja ]; then
    meson setup --reconfigure build "$@" >/dev/null
else
    meson setup build "$@"
fi
ninja -C build

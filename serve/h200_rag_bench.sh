#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs rag_bench on the lent H200 through NVIDIA's OpenCL driver.
#   serve/h200_rag_bench.sh BUILD_DIR [rag_bench options...]
# The GPU machine has the NVIDIA driver but registers only PoCL, and has no
# CLBlast: build here, carry BUILD_DIR and .device-carry/clblast (a copy of
# this machine's libclblast.so.1: mkdir -p .device-carry/clblast &&
# cp -L /usr/lib/x86_64-linux-gnu/libclblast.so.1 .device-carry/clblast/).
# tools/nvidia-opencl-env.sh makes NVIDIA's driver visible to the ICD loader.
set -e
build=${1:?usage: serve/h200_rag_bench.sh BUILD_DIR [rag_bench options]}
shift
. tools/nvidia-opencl-env.sh
here=$(pwd)
export LD_LIBRARY_PATH="$here/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$build/serve/rag_bench" "$@"

#!/bin/sh
# Runs rag_bench on the lent H200 through NVIDIA's OpenCL driver.
#   serve/h200_rag_bench.sh BUILD_DIR [rag_bench options...]
# The GPU machine has the NVIDIA driver but registers only PoCL, and has no
# CLBlast: build here, carry BUILD_DIR and .device-carry/clblast (a copy of
# this machine's libclblast.so.1: mkdir -p .device-carry/clblast &&
# cp -L /usr/lib/x86_64-linux-gnu/libclblast.so.1 .device-carry/clblast/).
# The ICD setup is gpu/nvidia-opencl-env.sh of the shared notes, inlined
# because shared/ does not travel.
set -e
build=${1:?usage: serve/h200_rag_bench.sh BUILD_DIR [rag_bench options]}
shift
lib=$(ls /usr/lib/libnvidia-opencl.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 \
      /usr/local/nvidia/lib64/libnvidia-opencl.so.1 2>/dev/null | head -n 1)
if [ -z "$lib" ]; then echo "h200_rag_bench: no libnvidia-opencl.so.1" >&2; exit 1; fi
mkdir -p /tmp/ocl-vendors
echo "$lib" > /tmp/ocl-vendors/nvidia.icd
export OCL_ICD_VENDORS=/tmp/ocl-vendors
here=$(pwd)
export LD_LIBRARY_PATH="$here/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$build/serve/rag_bench" "$@"

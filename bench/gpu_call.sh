# SPDX-License-Identifier: Apache-2.0
# Sourced by the serve/ device-call script (bench/serve/run_gpu.sh) with
# $out and $bin set: makes NVIDIA's OpenCL visible, puts $bin/extra-lib
# (libcmocka) and the carried CLBlast on the library path, and defines step.
mkdir -p "$out"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/$bin/extra-lib:$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
step() { # name seconds command...: runs it into $out/name.log, prints rc and time
    name=$1 secs=$2
    shift 2
    start=$(date +%s)
    timeout "$secs" "$@" >> "$out/$name.log" 2>&1
    rc=$?
    echo "$name: $* rc=$rc $(( $(date +%s) - start ))s"
}

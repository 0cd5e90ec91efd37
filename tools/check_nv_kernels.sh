#!/bin/sh
# Compiles the NVIDIA fast-path kernels to PTX with clang's NVPTX target, for
# every specialisation the host builds (head dim 64/128, block 16/32). CI has
# no NVIDIA GPU: this catches syntax and inline-asm constraint errors there;
# correctness and speed are checked on the GPU (bench/run_gpu.sh).
set -eu
cd "$(dirname "$0")/.."
out=${1:-build/nv-ptx}
mkdir -p "$out"
for kernel in prefill_nv decode_nv; do
    cat cl/block_entry.h cl/storage.h cl/rope.h cl/mma_nv.h "cl/$kernel.cl" > "$out/$kernel.cl"
    for d in 64 128; do
        for b in 16 32; do
            clang -target nvptx64-nvidia-nvcl -cl-std=CL1.2 -Xclang -finclude-default-header \
                -Wno-pass-failed -Dasm=__asm__ -DLAZYATTN_FAST_NV=1 -DLZ_DTYPE=1 -DLZ_HEAD_DIM=$d -DLZ_BLOCK=$b \
                -DLZ_NV_KT=32 -DLZ_NV_WARPS=8 -DLZ_NV_DSTAGES=4 -O2 -S \
                -o "$out/$kernel.d$d.b$b.ptx" "$out/$kernel.cl"
            n=$(grep -c "mma.sync.aligned.m16n8k16" "$out/$kernel.d$d.b$b.ptx")
            [ "$n" -gt 0 ] || { echo "$kernel d=$d b=$b: no mma.sync in the PTX" >&2; exit 1; }
            echo "$kernel d=$d b=$b: PTX with $n mma.sync"
        done
    done
done
# the opt-in wgmma prefill (its instructions behind //@ markers until
# lib/ptx_sm90a.c unmarks them on the GPU)
for d in 64 128; do
    clang -target nvptx64-nvidia-nvcl -cl-std=CL1.2 -Xclang -finclude-default-header \
        -Wno-pass-failed -Dasm=__asm__ -DLAZYATTN_FAST_NV=1 -DLZ_DTYPE=1 -DLZ_HEAD_DIM=$d -DLZ_BLOCK=16 \
        -DLZ_NV_KT=32 -DLZ_NV_WARPS=8 -DLZ_NV_WGMMA=1 -O2 -S \
        -o "$out/prefill_nv.d$d.wgmma.ptx" "$out/prefill_nv.cl"
    n=$(grep -c "//@wgmma.mma_async" "$out/prefill_nv.d$d.wgmma.ptx")
    [ "$n" -gt 0 ] || { echo "prefill_nv d=$d wgmma: no marked wgmma in the PTX" >&2; exit 1; }
    echo "prefill_nv d=$d wgmma: PTX with $n marked wgmma"
done

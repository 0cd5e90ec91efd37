#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compiles the NVIDIA fast-path kernels to PTX with clang's NVPTX target, for
# every specialisation the host builds (head dim 64/128, block 16/32). CI has
# no NVIDIA GPU: this catches syntax and inline-asm constraint errors there;
# correctness and speed are checked on the GPU (bench/run_gpu.sh).
# About 90 clang builds (2 s of CPU each) and 30 ptxas runs: they run as
# jobs, one a core (NV_CHECK_JOBS=N changes it); the checks that read
# several outputs run once all are built.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -eu
cd "$(dirname "$0")/.."
out=${1:-build/nv-ptx}
mkdir -p "$out"
start=$SECONDS
par=${NV_CHECK_JOBS:-$(nproc 2>/dev/null || echo 2)}
# shellcheck source=tools/jobs.sh
. tools/jobs.sh
# compile KERNEL NAME PATTERN DEFINES...: cl/KERNEL.cl (with its headers)
# to $out/NAME.ptx, which must contain PATTERN (DEFINES may override the
# defaults here, LZ_NV_WARPS for one)
compile() { job compile_now "$@"; }
compile_now() {
    kernel=$1 name=$2 pattern=$3
    shift 3
    clang -target nvptx64-nvidia-nvcl -cl-std=CL1.2 -Xclang -finclude-default-header \
        -Wno-pass-failed -Wno-macro-redefined -Dasm=__asm__ -DLAZYATTN_FAST_NV=1 -DLZ_DTYPE=1 -DLZ_NV_KT=32 \
        -DLZ_NV_WARPS=8 "$@" -O2 -S -o "$out/$name.ptx" "$out/$kernel.cl"
    n=$(grep -c "$pattern" "$out/$name.ptx" || true)
    [ "$n" -gt 0 ] || { echo "$name: no $pattern in the PTX" >&2; exit 1; }
    echo "$name: PTX with $n $pattern"
}
# The prefill's programs, one a variant, as lib/attn/nv_build.c lists their
# sources (cl/nv/): the work-group's own copies (mma.sync, or wgmma without
# the producer), the producer's wgmma, the persistent one
nv_common="cl/block_entry.h cl/kernel_abi.h cl/storage.h cl/rope.h cl/softmax_state.h cl/nv/ptx.h cl/nv/attn_mma.h
    cl/nv/prefill_common.h"
# shellcheck disable=SC2086 # word lists of files
{
    cat $nv_common cl/nv/prefill_mma.cl cl/nv/prefill_kernels.cl > "$out/prefill_mma.cl"
    cat $nv_common cl/nv/prefill_producer.h cl/nv/prefill_wgmma.cl cl/nv/prefill_kernels.cl > "$out/prefill_wgmma.cl"
    cat $nv_common cl/nv/prefill_producer.h cl/nv/prefill_wgmma.cl cl/nv/prefill_persistent.cl \
        cl/nv/prefill_kernels.cl > "$out/prefill_persistent.cl"
}
cat cl/block_entry.h cl/kernel_abi.h cl/storage.h cl/rope.h cl/softmax_state.h cl/nv/ptx.h cl/nv/attn_mma.h \
    cl/decode_nv.cl > "$out/decode_nv.cl"
for d in 64 128; do
    for b in 16 32; do
        compile prefill_mma prefill_nv.d$d.b$b mma.sync.aligned.m16n8k16 -DLZ_HEAD_DIM=$d -DLZ_BLOCK=$b
        # ... reading pages of the tiled layout (lazyattn_kv_layout)
        compile prefill_mma prefill_nv.d$d.b$b.tiled mma.sync.aligned.m16n8k16 \
            -DLZ_HEAD_DIM=$d -DLZ_BLOCK=$b -DLZ_KV_TILED=1
        compile decode_nv decode_nv.d$d.b$b mma.sync.aligned.m16n8k16 \
            -DLZ_HEAD_DIM=$d -DLZ_BLOCK=$b -DLZ_NV_DSTAGES=4
        compile decode_nv decode_nv.d$d.b$b.tiled mma.sync.aligned.m16n8k16 \
            -DLZ_HEAD_DIM=$d -DLZ_BLOCK=$b -DLZ_NV_DSTAGES=4 -DLZ_KV_TILED=1
    done
done
# the decode in the wgmma program with the producer (its softmax choices, cl/nv/attn_mma.h)
compile decode_nv decode_nv.d128.producer ex2.approx.ftz.f32 -DLZ_HEAD_DIM=128 -DLZ_BLOCK=16 -DLZ_NV_DSTAGES=3 \
    -DLZ_KV_TILED=1 -DLZ_NV_WGMMA=1 -DLZ_NV_PRODUCER=1 -DLZ_NV_WARPS=12
# the wgmma prefill (its instructions behind //@ markers until
# lib/ptx_sm90a.c unmarks them on the GPU)
for d in 64 128; do
    # without the producer (where its rings do not fit): S and P V on wgmma (checked at the end)
    compile prefill_mma prefill_nv.d$d.wgmma //@wgmma.mma_async -DLZ_HEAD_DIM=$d -DLZ_BLOCK=16 -DLZ_NV_WGMMA=1
    # the producer warpgroup, its mbarrier rings and setmaxnreg, with FA3's ping-pong of the
    # consumer warpgroups (named barriers) at 12 and 8 consumer warps, without it at 4
    for w in 12 8; do
        compile prefill_wgmma prefill_nv.d$d.wgmma_pingpong_w$w bar.arrive -DLZ_HEAD_DIM=$d -DLZ_BLOCK=16 \
            -DLZ_NV_WGMMA=1 -DLZ_NV_WARPS=$w -DLZ_NV_PRODUCER=1
    done
    compile prefill_wgmma prefill_nv.d$d.wgmma_producer_w4 cp.async.mbarrier.arrive.noinc -DLZ_HEAD_DIM=$d \
        -DLZ_BLOCK=16 -DLZ_NV_WGMMA=1 -DLZ_NV_WARPS=4 -DLZ_NV_PRODUCER=1
    # ... reading a tiled pool, its full pages one cp.async.bulk each
    compile prefill_wgmma prefill_nv.d$d.wgmma_pingpong_tiled cp.async.bulk.shared -DLZ_HEAD_DIM=$d -DLZ_BLOCK=16 \
        -DLZ_NV_WGMMA=1 -DLZ_NV_WARPS=12 -DLZ_NV_PRODUCER=1 -DLZ_KV_TILED=1
    # ... persistent (a work-group a SM running task lists; redux.sync for each task's
    # positions), at 12 and 8 consumer warps
    for w in 12 8; do
        compile prefill_persistent prefill_nv.d$d.wgmma_persist_w$w redux.sync.max.s32 -DLZ_HEAD_DIM=$d \
            -DLZ_BLOCK=16 -DLZ_NV_WGMMA=1 -DLZ_NV_WARPS=$w -DLZ_NV_PRODUCER=1 -DLZ_KV_TILED=1 -DLZ_NV_PERSIST=1
    done
    # ... the default at 12 warps: the producer fences its 16-byte copies itself (no cp.async
    # arrival), the scores of a tile as one wgmma m64n32k16 (checked at the end)
    compile prefill_wgmma prefill_nv.d$d.wgmma_producer fence.proxy.async -DLZ_HEAD_DIM=$d -DLZ_BLOCK=16 \
        -DLZ_NV_WGMMA=1 -DLZ_NV_WARPS=12 -DLZ_NV_PRODUCER=1
done
# the producer's mbarrier protocol (1, 2 or 4 copying warps) under random interleavings, on the host
if command -v python3 >/dev/null 2>&1; then job python3 tools/sim_prefill_producer.py; fi
# the portable small-work-group decode (cl/decode_warp.cl, in the decode program
# with cl/decode.cl) as NVIDIA's OpenCL sees it: f16 storage, its inline-PTX
# conversions (cl_nv_pragma_unroll), the H200 tile and the K ring
cat cl/block_entry.h cl/kernel_abi.h cl/storage.h cl/rope.h cl/softmax_state.h cl/decode.cl cl/decode_warp.cl \
    > "$out/decode_warp.cl"
decode_warp() {
        d=$1 ring=$2
        name=decode_warp.d$d.r$ring
        clang -target nvptx64-nvidia-nvcl -cl-std=CL1.2 -Xclang -finclude-default-header \
            -Xclang -cl-ext=+cl_khr_fp16 -Wno-pass-failed -Dasm=__asm__ -Dcl_nv_pragma_unroll=1 \
            -DLZ_DTYPE=1 -DLZ_HEAD_DIM=$d -DLZ_BLOCK=16 -DLZ_G=4 -DLZ_FR=4 -DLZ_FTK=8 -DLZ_FWG=32 \
            -DLZ_FON=4 -DLZ_FRN=$ring -O2 -S -o "$out/$name.ptx" "$out/decode_warp.cl"
        for k in lz_decode_warp lz_decode_warp_reduce; do
            grep -q "^\.entry $k(" "$out/$name.ptx" || { echo "$name: no $k" >&2; exit 1; }
        done
        echo "$name: PTX with lz_decode_warp and lz_decode_warp_reduce"
}
for d in 64 128; do
    for ring in 1 2; do job decode_warp $d $ring; done
done
# serve/'s large-M bf16 GEMM (serve/gemm_nv_large.cl after cl/nv/ptx.h, as the host builds
# it: wgmma behind //@ markers until lazyattn_context_build_program's sm_90a round trip
# unmarks them on the GPU), a few tiles
cat cl/nv/ptx.h serve/gemm_nv_large.cl > "$out/gemm_nv_large.cl"
gemm_large() {
    name=gemm_nv_large.wg$1.mw$2.bn$3.bk$4.s$5.l$6
    clang -target nvptx64-nvidia-nvcl -cl-std=CL1.2 -Xclang -finclude-default-header \
        -Wno-pass-failed -Dasm=__asm__ -DLG_WG=$1 -DLG_MW=$2 -DLG_BN=$3 -DLG_BK=$4 -DLG_STAGES=$5 \
        -DLG_LAG=$6 -O2 -S -o "$out/$name.ptx" "$out/gemm_nv_large.cl"
    grep -q "//@wgmma.mma_async.sync.aligned.m64n$3k16.f32.bf16.bf16" "$out/$name.ptx" ||
        { echo "$name: no wgmma m64n$3k16 in the PTX" >&2; exit 1; }
    echo "$name: PTX with wgmma m64n$3k16"
}
for t in "2 1 128 64 1 0" "1 2 128 32 3 0" "2 1 256 16 4 1"; do
    job gemm_large $t
done
# serve/'s decode-sized bf16 GEMM (serve/gemm_nv_small.cl after cl/nv/ptx.h): X read
# directly, with the W prefetch and K slices, and staged in local memory
cat cl/nv/ptx.h serve/gemm_nv_small.cl > "$out/gemm_nv_small.cl"
compile gemm_nv_small gemm_nv_small.direct mma.sync.aligned.m16n8k16.row.col.f32.bf16 -DGS_R=1 -DGS_WR=1 -DGS_WK=8
compile gemm_nv_small gemm_nv_small.pipe mma.sync.aligned.m16n8k16.row.col.f32.bf16 -DGS_PIPE=1 -DGS_WHINT=2
compile gemm_nv_small gemm_nv_small.xs cp.async.cg.shared.global -DGS_XS=1 -DGS_WK=2 -DGS_U=2 -DGS_PIPE=1
# decode's fused variants (GS_FUSE 1: f32 X with the RMSNorm, the SwiGLU epilogue) of the
# default mma.sync shapes (serve/gemm_nv_small.c gs_defaults)
compile gemm_nv_small gemm_nv_small.fused.k8u8 mma.sync.aligned.m16n8k16.row.col.f32.bf16 -DGS_FUSE=1 \
    -DGS_R=1 -DGS_WR=1 -DGS_WK=8 -DGS_U=8 -DGS_WHINT=2
compile gemm_nv_small gemm_nv_small.fused.r2k2 mma.sync.aligned.m16n8k16.row.col.f32.bf16 -DGS_FUSE=1 \
    -DGS_R=2 -DGS_WR=4 -DGS_WK=2 -DGS_U=4 -DGS_WHINT=2
# the wgmma modes (GS_XS 2, 3: wgmma m64n(8 NT)k16 behind //@ markers, A = W
# from registers, X through a descriptor, staged by cp.async or registers), a few shapes; where ptxas is installed
# (PTXAS, default /usr/local/cuda/bin/ptxas) also unmarked and assembled for
# sm_90a: no stack frame, no spills, no serialized wgmma (ptxas C75xx notes);
# the register counts are printed (NVIDIA's compiler differs by a few)
ptxas=${PTXAS:-/usr/local/cuda/bin/ptxas}
# OpenCL's work-item functions as NVVM special registers (ptxas links no OpenCL library)
cat > "$out/nv_workitem.h" <<'EOF2'
#define get_local_id(d) ((size_t)((d) == 0 ? __nvvm_read_ptx_sreg_tid_x() : (d) == 1 ? __nvvm_read_ptx_sreg_tid_y() : __nvvm_read_ptx_sreg_tid_z()))
#define get_group_id(d) ((size_t)((d) == 0 ? __nvvm_read_ptx_sreg_ctaid_x() : (d) == 1 ? __nvvm_read_ptx_sreg_ctaid_y() : __nvvm_read_ptx_sreg_ctaid_z()))
#define barrier(f) __syncthreads()
EOF2
# gemm_small_wg R WR WK U PIPE XS [MAXREG [FUSE]]: one shape (FUSE 1: GS_FUSE, decode's fused variant)
gemm_small_wg() {
    maxreg=${7:-0} fuse=${8:-0}
    name=gemm_nv_small.wg.r$1.wr$2.wk$3.u$4.p$5.xs$6
    [ "$fuse" = 0 ] || name=$name.fused
    compile_now gemm_nv_small $name //@wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 \
        -DGS_XS=$6 -DGS_R=$1 -DGS_WR=$2 -DGS_WK=$3 -DGS_U=$4 -DGS_PIPE=$5 -DGS_WHINT=2 -DGS_FUSE=$fuse
    for k in 1 2 3 4 5 6 7 8; do
        grep -q "wgmma.mma_async.sync.aligned.m64n$((8 * k))k16.f32.bf16.bf16" "$out/$name.ptx" ||
            { echo "$name: no wgmma m64n$((8 * k))k16" >&2; exit 1; }
    done
    [ -x "$ptxas" ] || return 0
    clang -target nvptx64-nvidia-nvcl -cl-std=CL1.2 -Xclang -finclude-default-header -include "$out/nv_workitem.h" \
        -Wno-pass-failed -Dasm=__asm__ -DGS_XS=$6 -DGS_R=$1 -DGS_WR=$2 -DGS_WK=$3 -DGS_U=$4 -DGS_PIPE=$5 \
        -DGS_WHINT=2 -DGS_FUSE=$fuse -O2 -S -o "$out/$name.sreg.ptx" "$out/gemm_nv_small.cl"
    sed -e 's#//@##' -e 's/^\.target sm_[0-9]*.*/.target sm_90a/' -e 's/^\.version .*/.version 8.0/' \
        "$out/$name.sreg.ptx" > "$out/$name.sm90a.ptx"
    cap=""
    [ "$maxreg" = 0 ] || cap="-maxrregcount=$maxreg"
    "$ptxas" -arch=sm_90a -v $cap "$out/$name.sm90a.ptx" -o "$out/$name.cubin" > "$out/$name.ptxas.log" 2>&1 ||
        { cat "$out/$name.ptxas.log" >&2; exit 1; }
    if grep -E "C75[0-9][0-9]|[1-9][0-9]* bytes (stack frame|spill)" "$out/$name.ptxas.log" >&2; then
        echo "$name: stack, spills or serialized wgmma (above)" >&2
        exit 1
    fi
    echo "$name: ptxas sm_90a registers nt1..8:" $(grep -o "Used [0-9]* registers" "$out/$name.ptxas.log" |
        awk '{print $2}' | tac)
}
# xs 4 under the host's register cap (serve/gemm_nv_small.c gs_maxreg: 12
# warps a CU in whole work-groups: 168 for 4 or 12 warps, 128 for 8 or 16; xs 5: 16 warps,
# 128 for 4, 8 or 16), the 7th field
for t in "1 4 1 2 1 2" "2 4 1 2 1 2" "1 8 1 2 0 2" "2 4 2 2 1 2" "1 4 1 4 1 2" "2 8 1 1 1 2" \
    "1 4 3 1 0 2" "1 4 1 2 1 3" "2 4 1 2 1 3" "1 8 2 1 0 3" \
    "1 4 1 4 1 4 168" "2 4 1 2 1 4 168" "1 4 1 2 1 4 168" "1 8 1 2 1 4 128" "1 8 2 1 0 4 128" \
    "1 12 1 4 1 4 168" "1 12 1 4 1 3" "1 4 1 1 1 5 128" "1 8 1 1 1 5 128" "1 4 1 2 1 5 128" \
    "1 8 1 2 1 3 0 1" "1 12 1 4 1 3 0 1"; do # the last two: the sm_90 defaults' fused variants
    job gemm_small_wg $t
done
# The wgmma prefill at d 64 (where clang's PTX needs no spills; at d 128 clang takes far more
# registers than NVIDIA's compiler), without and with the producer and the variants of issue 11 steps 4-8, unmarked
# and assembled for sm_90a: no serialized wgmma (ptxas C75xx), which a second wgmma pass or a
# second wgmma shape in lz_nv_scores brought, or setmaxnreg ignored (C7508). Registers and spills
# are printed, not judged: clang's PTX under the work-group's cap spills where NVIDIA's compiler
# (fewer registers) does not; the device call's verbose log has NVIDIA's counts
# prefill_wgmma12 NAME PROGRAM DEFINES...: one variant at d 64, 12 consumer warps
prefill_wgmma12() {
    name=prefill_nv.d64.wgmma12.$1 program=$2
    shift 2
    clang -target nvptx64-nvidia-nvcl -cl-std=CL1.2 -Xclang -finclude-default-header \
        -include "$out/nv_workitem.h" -include "$out/nv_prefill_builtins.h" -Wno-pass-failed -Wno-macro-redefined \
        -Dasm=__asm__ \
        -DLAZYATTN_FAST_NV=1 -DLZ_DTYPE=1 -DLZ_NV_KT=32 -DLZ_NV_WARPS=12 -DLZ_HEAD_DIM=64 -DLZ_BLOCK=16 \
        -DLZ_NV_WGMMA=1 "$@" -O2 -S -o "$out/$name.sreg.ptx" "$out/$program.cl"
    # the work-group size as NVIDIA's compiler writes it (.reqntid): 12 warps, the producer's
    # warpgroup 4 more
    # and, with setmaxnreg, ".minnctapersm 1" as lib/ptx_sm90a.c adds it
    threads=384 minctas=""
    case "$*" in *LZ_NV_PRODUCER=1*) threads=512 minctas=".minnctapersm 1" ;; esac
    sed -e 's#//@##' -e 's/^\.target sm_[0-9]*.*/.target sm_90a/' -e 's/^\.version .*/.version 8.0/' \
        "$out/$name.sreg.ptx" | awk -v n="$threads" -v m="$minctas" \
        '/^\.entry /{e=1} e && /^\)/{print; print ".reqntid " n ", 1, 1"; if (m != "") print m; e=0; next} {print}' \
        > "$out/$name.sm90a.ptx"
    [ "$(grep -c '^\.reqntid' "$out/$name.sm90a.ptx")" = 2 ] || { echo "$name: no .reqntid written" >&2; exit 1; }
    "$ptxas" -arch=sm_90a -v "$out/$name.sm90a.ptx" -o "$out/$name.cubin" > "$out/$name.ptxas.log" 2>&1 ||
        { cat "$out/$name.ptxas.log" >&2; exit 1; }
    if grep -E "C75[0-9][0-9]" "$out/$name.ptxas.log" >&2; then
        echo "$name: serialized wgmma or setmaxnreg ignored (above)" >&2
        exit 1
    fi
    echo "$name: ptxas sm_90a registers (batched, single):" $(grep -o "Used [0-9]* registers" \
        "$out/$name.ptxas.log" | awk '{print $2}') "spill stores:" $(grep -o "[0-9]* bytes spill stores" \
        "$out/$name.ptxas.log" | awk '{print $1}')
}
if [ -x "$ptxas" ]; then
    cat > "$out/nv_prefill_builtins.h" <<'EOF2'
#define get_num_groups(d) ((size_t)((d) == 0 ? __nvvm_read_ptx_sreg_nctaid_x() : (d) == 1 ? __nvvm_read_ptx_sreg_nctaid_y() : __nvvm_read_ptx_sreg_nctaid_z()))
#define native_cos(x) __nvvm_cos_approx_f(x)
#define native_sin(x) __nvvm_sin_approx_f(x)
#define native_exp2(x) __nvvm_ex2_approx_f(x)
#define fma(a, b, c) __builtin_fmaf(a, b, c)
#define fmax(a, b) __builtin_fmaxf(a, b)
#define rint(x) __builtin_rintf(x)
#define vstore2(v, o, p) (*(__global float2 *)(p) = (v))
#define atomic_or(p, v) (*(p) |= (v))
#define atomic_max(p, v) (*(p) = *(p) > (v) ? *(p) : (v))
#define atomic_min(p, v) (*(p) = *(p) < (v) ? *(p) : (v))
EOF2
    for v in "base prefill_mma" "producer prefill_wgmma -DLZ_NV_PRODUCER=1" \
        "block32 prefill_wgmma -DLZ_NV_PRODUCER=1 -DLZ_BLOCK=32" "kt64 prefill_wgmma -DLZ_NV_PRODUCER=1 -DLZ_NV_KT=64" \
        "tiled prefill_wgmma -DLZ_NV_PRODUCER=1 -DLZ_KV_TILED=1" \
        "persist prefill_persistent -DLZ_NV_PRODUCER=1 -DLZ_KV_TILED=1 -DLZ_NV_PERSIST=1"; do
        job prefill_wgmma12 $v
    done
fi
# GS_XS 5's local-memory layout (W and X tiles read back through the descriptors), on the host
if command -v python3 >/dev/null 2>&1; then job python3 tools/sim_gemm_small_xs5.py; fi
drain check_nv_kernels
# ---- checks over several outputs (once every job is done) ----
# the decode's block products with the keys as the mma's rows (for G <= 8: movmatrix.trans) in
# every decode above
for f in "$out"/decode_nv.d*.ptx; do
    grep -q "movmatrix.sync.aligned.m8n8.trans.b16" "$f" || { echo "$f: no movmatrix (keys as rows)" >&2; exit 1; }
done
for d in 64 128; do
    # O += P V on wgmma too (A from registers, V MN-major: m64n<d>k16)
    grep -q "//@wgmma.mma_async.sync.aligned.m64n${d}k16.f32.f16.f16" "$out/prefill_nv.d$d.wgmma.ptx" ||
        { echo "prefill_nv.d$d.wgmma: no wgmma m64n${d}k16 (P V)" >&2; exit 1; }
    grep -q "//@wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16" "$out/prefill_nv.d$d.wgmma_producer.ptx" ||
        { echo "prefill_nv.d$d.wgmma_producer: no wgmma m64n32k16 (LZ_NV_S_WIDE)" >&2; exit 1; }
done
# the batched ragged prefill kernel is in the prefill program next to lz_prefill_nv
for f in "$out"/prefill_nv.d*.b*.ptx; do
    grep -q '^\.entry lz_prefill_nv_batched' "$f" || { echo "$f: no lz_prefill_nv_batched" >&2; exit 1; }
done
echo "lz_prefill_nv_batched: in every prefill_nv PTX"
for k in 1 2 3 4 5 6 7 8; do
    grep -q "^\.entry gs_gemm_nt$k(" "$out/gemm_nv_small.xs.ptx" || { echo "gemm_nv_small: no gs_gemm_nt$k" >&2; exit 1; }
done
echo "check_nv_kernels: every build and check passed ($((SECONDS - start)) s, $par jobs at once)"

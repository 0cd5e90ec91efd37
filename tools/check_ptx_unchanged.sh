#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tools/check_ptx_unchanged.sh BASE_REV [OUT_DIR]
#
# Proves that a change to the NVIDIA kernels' sources leaves their code alone:
# compiles every NVIDIA prefill/decode program the host can select (head dim
# 64/128 x block 16/32 x linear/tiled KV; mma.sync 8 warps; wgmma 12 warps
# with the producer warpgroup, persistent or not; the geometry LAZYATTN_TUNE
# can select) to PTX with clang's NVPTX target, once from the sources at
# BASE_REV and once from the working tree, each with the source list and
# defines its own host used, and compares the two byte for byte after
# normalising names only: parameter, label, local-depot, demoted local
# array and virtual register names are renumbered in order of appearance
# in each function (and the register declarations' counts dropped: a dead
# register left by the front end's different but equivalent IR moves the
# numbers, not the code), comment lines outside function bodies dropped
# (the //@ wgmma markers stay), and the top-level items (kernels,
# functions, declarations) sorted, so that moving a function between files
# does not count as a difference. One line a variant; exit 1 on a difference.
# Also serve/'s decode-sized bf16 GEMM (serve/gemm_nv_small.cl after cl/nv/ptx.h) in the
# plain shapes its host can select (GS_FUSE 0), where BASE_REV has that file.
#
# The BASE_REV builds' PTX is kept in OUT_DIR/base-<commit> and reused. The normal forms'
# SHA-256 are recorded in tools/ptx_reference/<commit>.sha256 (PTX_CHECK_RECORD=1 writes it
# from the BASE_REV builds) under the clang version and this script's own SHA-256: where both
# match, the working tree is compared with the record and BASE_REV is not built at all (half
# the time in CI); otherwise, or with PTX_CHECK_NO_RECORD=1, BASE_REV is built as above.
# PTX_CHECK_JOBS=N: clang jobs at once (default: the cores);
# PTX_CHECK_ONLY=REGEX: only the variants whose name matches (while editing).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -eu
[ $# -ge 1 ] || { echo "usage: $0 BASE_REV [OUT_DIR]" >&2; exit 2; }
cd "$(dirname "$0")/.."
rev=$(git rev-parse --verify "$1^{commit}")
out=${2:-build/ptx-unchanged}
mkdir -p "$out"
out=$(cd "$out" && pwd)
par=${PTX_CHECK_JOBS:-$(nproc 2>/dev/null || echo 2)}
start=$SECONDS

# the sources at BASE_REV (cl/ only), once
base_src=$out/src-$rev
if [ ! -d "$base_src/cl" ] || [ ! -e "$base_src/serve.done" ]; then
    rm -rf "$base_src.tmp" "$base_src" && mkdir -p "$base_src.tmp"
    git archive "$rev" cl | tar -x -C "$base_src.tmp"
    if git cat-file -e "$rev:serve/gemm_nv_small.cl" 2>/dev/null; then
        git archive "$rev" serve/gemm_nv_small.cl | tar -x -C "$base_src.tmp"
    fi
    touch "$base_src.tmp/serve.done"
    mv "$base_src.tmp" "$base_src"
fi
base_dir=$out/base-$rev new_dir=$out/new
rm -rf "$new_dir"
mkdir -p "$base_dir" "$new_dir"

# program TREE WGMMA PRODUCER PERSIST: the sources of the NVIDIA program, in
# the host's order, for the layout of the cl/ in TREE (lib/attention.c of
# 6c2225c: one prefill file; lib/attn/nv_build.c since: cl/nv/, a file a
# variant, beside the PTX primitives and the split-merge state)
program() {
    local cl=$1/cl wgmma=$2 producer=$3 persist=$4
    if [ -f "$cl/prefill_nv.cl" ]; then
        cat "$cl/block_entry.h" "$cl/kernel_abi.h" "$cl/storage.h" "$cl/rope.h" "$cl/mma_nv.h" \
            "$cl/prefill_nv.cl" "$cl/decode_nv.cl"
        return
    fi
    local variant=$cl/nv/prefill_mma.cl
    if [ "$producer" = 1 ]; then
        variant="$cl/nv/prefill_producer.h $cl/nv/prefill_wgmma.cl"
        [ "$persist" = 1 ] && variant="$variant $cl/nv/prefill_persistent.cl"
    fi
    # shellcheck disable=SC2086 # $variant: one to three files
    cat "$cl/block_entry.h" "$cl/kernel_abi.h" "$cl/storage.h" "$cl/rope.h" "$cl/softmax_state.h" \
        "$cl/nv/ptx.h" "$cl/nv/attn_mma.h" "$cl/nv/prefill_common.h" $variant "$cl/nv/prefill_kernels.cl" \
        "$cl/decode_nv.cl"
}

# defines TREE D B TILED KT WARPS WGMMA PRODUCER PERSIST DSTAGES: the build
# options the host of TREE passes (the decode's tree fan-in, 0, only up to
# 6c2225c)
defines() {
    local tree=$1 d=$2 b=$3 tiled=$4 kt=$5 warps=$6 wgmma=$7 producer=$8 persist=$9 dstages=${10}
    local o="-DLZ_HEAD_DIM=$d -DLZ_BLOCK=$b -DLZ_DTYPE=1 -DLZ_KV_TILED=$tiled -DLAZYATTN_FAST_NV=1"
    o="$o -DLZ_NV_KT=$kt -DLZ_NV_WARPS=$warps -DLZ_NV_DSTAGES=$dstages"
    [ -f "$tree/cl/prefill_nv.cl" ] && o="$o -DLZ_NV_DTREE=0"
    o="$o -DLZ_NV_RT=256 -DLZ_NV_WGMMA=$wgmma"
    [ "$producer" = 1 ] && o="$o -DLZ_NV_PRODUCER=1"
    [ "$persist" = 1 ] && o="$o -DLZ_NV_PERSIST=1"
    echo "$o"
}

# the normal form of a PTX file (stdin to stdout), see the head of this file
normalise() {
    python3 -c '
import re, sys
items, cur = [], []
top = re.compile(r"^(\.entry|\.func|\.visible|\.weak|\.extern|\.global|\.shared|\.const)\b")
depth = 0
for line in sys.stdin.read().split("\n"):
    if depth == 0 and line.startswith("//") and not line.startswith("//@"):
        continue
    if depth == 0 and top.match(line) and cur:
        items.append(cur)
        cur = []
    cur.append(line)
    depth += line.count("{") - line.count("}")
items.append(cur)
def norm(lines):
    text = "\n".join(lines).rstrip("\n")
    text = re.sub(r"\b\w+_param_(\d+)\b", r"PARAM_\1", text)
    text = re.sub(r"__local_depot\d+", "__local_depot", text)
    text = re.sub(r"(\.reg \.\w+ \s*%\w+)<\d+>", r"\1<>", text)
    for pat, stem in ((r"\$?L__BB\d+_\d+|\bLBB\d+_\d+", "L"), (r"\b\w+_\$_\w+", "LOCAL_"),
                      (r"%(?:rd|r|f|fd|p|rs|h|hh)\d+\b", None)):
        seen, count = {}, {}
        def name(m, seen=seen, count=count, stem=stem):
            k = m.group(0)
            if k not in seen:
                s = stem if stem else k.rstrip("0123456789") + "_"
                count[s] = count.get(s, 0) + 1
                seen[k] = s + str(count[s] - 1)
            return seen[k]
        text = re.sub(pat, name, text)
    return text
head, rest = items[0], items[1:]
print(norm(head))
for t in sorted(norm(i) for i in rest):
    print(t)
'
}

# build TREE DIR NAME ARGS...: TREE's program of variant NAME to DIR/NAME.ptx
# and its normal form DIR/NAME.norm
build() {
    local tree=$1 dir=$2 name=$3
    shift 3
    local wgmma=$6 producer=$7 persist=$8
    program "$tree" "$wgmma" "$producer" "$persist" > "$dir/$name.cl"
    # shellcheck disable=SC2046 # the defines are words
    clang -target nvptx64-nvidia-nvcl -cl-std=CL1.2 -Xclang -finclude-default-header -Wno-pass-failed \
        -Dasm=__asm__ $(defines "$tree" "$@") -O2 -S -o "$dir/$name.ptx.tmp" "$dir/$name.cl"
    normalise < "$dir/$name.ptx.tmp" > "$dir/$name.norm.tmp"
    mv "$dir/$name.ptx.tmp" "$dir/$name.ptx"
    mv "$dir/$name.norm.tmp" "$dir/$name.norm"
}

# build_serve TREE DIR NAME DEFINES...: TREE's serve/gemm_nv_small.cl (after its cl/nv/ptx.h)
# built with DEFINES to DIR/NAME.ptx and its normal form
build_serve() {
    local tree=$1 dir=$2 name=$3
    shift 3
    cat "$tree/cl/nv/ptx.h" "$tree/serve/gemm_nv_small.cl" > "$dir/$name.cl"
    clang -target nvptx64-nvidia-nvcl -cl-std=CL1.2 -Xclang -finclude-default-header -Wno-pass-failed \
        -Dasm=__asm__ "$@" -O2 -S -o "$dir/$name.ptx.tmp" "$dir/$name.cl"
    normalise < "$dir/$name.ptx.tmp" > "$dir/$name.norm.tmp"
    mv "$dir/$name.ptx.tmp" "$dir/$name.ptx"
    mv "$dir/$name.norm.tmp" "$dir/$name.norm"
}

# renormalise DIR/NAME: the normal form of a PTX kept from an earlier run
renormalise() {
    normalise < "$1.ptx" > "$1.norm.tmp"
    mv "$1.norm.tmp" "$1.norm"
}

# shellcheck source=tools/jobs.sh
. tools/jobs.sh

# The variants: NAME D B TILED KT WARPS WGMMA PRODUCER PERSIST DSTAGES (the
# decode ring the host takes for D x B: 3, 2 where 3 exceed 48 KB)
variants=()
for d in 64 128; do
    for b in 16 32; do
        ds=3
        [ $((3 * 4 * b * d)) -gt 48640 ] && ds=2
        for t in 0 1; do
            s=d$d.b$b.$([ $t = 1 ] && echo tiled || echo linear)
            variants+=("mma_w8.$s $d $b $t 32 8 0 0 0 $ds")               # not compute capability 9.x
            variants+=("wgmma_producer_w12.$s $d $b $t 32 12 1 1 0 $ds")  # the default on 9.x
            variants+=("persistent_w12.$s $d $b $t 32 12 1 1 1 $ds")      # nv.persist=1
        done
    done
    for t in 0 1; do
        s=d$d.b16.$([ $t = 1 ] && echo tiled || echo linear)
        variants+=("wgmma_producer_w8.$s $d 16 $t 32 8 1 1 0 3")     # groups of 8 with nv.wgmma=1
        variants+=("persistent_w8.$s $d 16 $t 32 8 1 1 1 3")
        variants+=("wgmma_w12.$s $d 16 $t 32 12 1 0 0 3")           # nv.producer=0 (and the fallback)
    done
    variants+=("wgmma_producer_w4.d$d.b16.linear $d 16 0 32 4 1 1 0 3")  # nv.warps=4
    variants+=("mma_w4_kt64.d$d.b16.linear $d 16 0 64 4 0 0 0 3")        # nv.kt=64, nv.warps=4
done

# serve/gemm_nv_small.cl's shapes: NAME DEFINES (serve/gemm_nv_small.c: the defaults by class and
# compute capability, then one of each X path, xs 1..5)
serve_variants=()
if [ -f "$base_src/serve/gemm_nv_small.cl" ] && [ -f "$base_src/cl/nv/ptx.h" ]; then
    serve_variants=(
        "serve_small.k8u8 -DGS_R=1 -DGS_WR=1 -DGS_WK=8 -DGS_U=8 -DGS_WHINT=2"
        "serve_small.r2k2 -DGS_R=2 -DGS_WR=4 -DGS_WK=2 -DGS_U=4 -DGS_WHINT=2"
        "serve_small.wide90 -DGS_XS=3 -DGS_R=1 -DGS_WR=8 -DGS_WK=1 -DGS_U=2 -DGS_PIPE=1 -DGS_WHINT=2"
        "serve_small.long90 -DGS_XS=3 -DGS_R=1 -DGS_WR=12 -DGS_WK=1 -DGS_U=4 -DGS_PIPE=1 -DGS_WHINT=2"
        "serve_small.pipe -DGS_PIPE=1 -DGS_WHINT=2"
        "serve_small.xs1 -DGS_XS=1 -DGS_WK=2 -DGS_U=2 -DGS_PIPE=1"
        "serve_small.xs2 -DGS_XS=2 -DGS_R=1 -DGS_WR=4 -DGS_WK=1 -DGS_U=2 -DGS_PIPE=1 -DGS_WHINT=2"
        "serve_small.xs4 -DGS_XS=4 -DGS_R=1 -DGS_WR=4 -DGS_WK=1 -DGS_U=4 -DGS_PIPE=1 -DGS_WHINT=2"
        "serve_small.xs5 -DGS_XS=5 -DGS_R=1 -DGS_WR=4 -DGS_WK=1 -DGS_U=1 -DGS_PIPE=1 -DGS_WHINT=2"
    )
else
    echo "serve/gemm_nv_small.cl: not compared (${rev:0:12} has no serve/gemm_nv_small.cl with cl/nv/ptx.h)"
fi

if [ -n "${PTX_CHECK_ONLY:-}" ]; then
    kept=()
    for v in "${variants[@]}"; do [[ ${v%% *} =~ $PTX_CHECK_ONLY ]] && kept+=("$v"); done
    variants=("${kept[@]}")
    kept=()
    for v in "${serve_variants[@]}"; do [[ ${v%% *} =~ $PTX_CHECK_ONLY ]] && kept+=("$v"); done
    serve_variants=("${kept[@]}")
fi
# the record of BASE_REV's normal forms, when it was made by this clang and this script
record=tools/ptx_reference/$rev.sha256
stamp="clang: $(clang --version | head -n 1); script: $(sha256sum tools/check_ptx_unchanged.sh | cut -d' ' -f1)"
use_record=0
if [ "${PTX_CHECK_RECORD:-0}" != 1 ] && [ "${PTX_CHECK_NO_RECORD:-0}" != 1 ] && [ -f "$record" ] &&
   [ "$(head -n 1 "$record")" = "$stamp" ]; then
    use_record=1
    echo "check_ptx_unchanged: ${rev:0:12}'s normal forms from $record"
elif [ -f "$record" ] && [ "${PTX_CHECK_RECORD:-0}" != 1 ]; then
    echo "check_ptx_unchanged: $record is of another clang or script: ${rev:0:12} built" \
         "(PTX_CHECK_RECORD=1 writes it again)"
fi
for v in "${variants[@]}"; do
    # shellcheck disable=SC2086
    set -- $v
    if [ "$use_record" = 1 ]; then
        :
    elif [ -s "$base_dir/$1.ptx" ]; then
        job renormalise "$base_dir/$1" # the PTX kept, its normal form made again (the rule may change)
    else
        job build "$base_src" "$base_dir" "$@"
    fi
    job build . "$new_dir" "$@"
done
for v in "${serve_variants[@]}"; do
    # shellcheck disable=SC2086
    set -- $v
    if [ "$use_record" = 1 ]; then
        :
    elif [ -s "$base_dir/$1.ptx" ]; then
        job renormalise "$base_dir/$1"
    else
        job build_serve "$base_src" "$base_dir" "$@"
    fi
    job build_serve . "$new_dir" "$@"
done
drain check_ptx_unchanged

if [ "${PTX_CHECK_RECORD:-0}" = 1 ] && [ -z "${PTX_CHECK_ONLY:-}" ]; then
    mkdir -p tools/ptx_reference
    {
        echo "$stamp"
        for v in "${variants[@]}" "${serve_variants[@]}"; do
            echo "$(sha256sum < "$base_dir/${v%% *}.norm" | cut -d' ' -f1) ${v%% *}"
        done
    } > "$record.tmp"
    mv "$record.tmp" "$record"
    echo "check_ptx_unchanged: wrote $record"
fi
# same: the normal form of the working tree's variant NAME is BASE_REV's
same() {
    if [ "$use_record" = 1 ]; then
        [ "$(grep " $1\$" "$record" | cut -d' ' -f1)" = "$(sha256sum < "$new_dir/$1.norm" | cut -d' ' -f1)" ]
    else
        cmp -s "$base_dir/$1.norm" "$new_dir/$1.norm"
    fi
}
differ=0
for v in "${variants[@]}" "${serve_variants[@]}"; do
    name=${v%% *}
    if same "$name"; then
        echo "$name: identical ($(grep -c . "$new_dir/$name.ptx") PTX lines)"
    else
        if [ "$use_record" = 1 ]; then
            echo "$name: DIFFERS from $record (PTX_CHECK_NO_RECORD=1 builds ${rev:0:12} to diff)"
        else
            echo "$name: DIFFERS (diff $base_dir/$name.norm $new_dir/$name.norm)"
        fi
        differ=$((differ + 1))
    fi
done
echo "check_ptx_unchanged: $((${#variants[@]} + ${#serve_variants[@]})) variants against ${rev:0:12}, $differ differ ($((SECONDS - start)) s)"
[ "$differ" = 0 ]

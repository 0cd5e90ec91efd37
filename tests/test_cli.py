#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The programs' command lines (common/cli_options.c), table-driven.

Every bad option set must exit non-zero (2 for a bad command line, 1 for a
run that could not do what was asked) with a message on stderr naming the
option; a few small good runs must exit 0 and write what they promise.

usage: test_cli.py NAME=PATH... (quickstart, cache_path, list_devices, tune_kernels, hitratio, bench_kernels,
probe_wgmma_layout, probe_wgmma_rs, probe_wgmma_rate, probe_tier_load, rag_bench, bench_gemm,
bench_gemm_small, bench_forward, bench_gemv_quant, tokenize;
a program not given is not tested).
Runs in a scratch directory, so output files never land in the tree.
"""
import atexit
import csv
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

# The tokenizer fixtures (tools/tokenizer_fixtures.py); the tests run in a scratch directory.
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
TOK_LLAMA3 = os.path.join(FIXTURES, "tok_llama3.gguf")
TOK_SPM = os.path.join(FIXTURES, "tok_spm.gguf")
TOK_QWEN2 = os.path.join(FIXTURES, "tok_qwen2.gguf")
NO_TOKENIZER = os.path.join(FIXTURES, "no_scaling.gguf")

# (program, arguments, expected exit status, text stderr must contain)
USAGE = 2
FAILED = 1

# A hitratio run in a few milliseconds: 6 documents of 32 tokens, a one-layer model.
HR_SMALL = ["--docs", "6", "--doc-len", "32", "--k", "2", "--requests", "8", "--layers", "1",
            "--kv-heads", "1", "--head-dim", "16", "--quiet"]
# A rag_bench run of two requests on the tiny model (kernels built in well under a minute on PoCL).
RB_SMALL = ["--model", "tiny", "--requests", "2", "--docs", "4", "--doc-len", "8:16", "--k", "2",
            "--question", "4:4", "--gen", "2:2", "--prefix", "0", "--policies", "lazy",
            "--no-progress", "--no-profiling"]

BAD = [
    # hitratio: the attack's cases first
    ("hitratio", ["--budgets", ",,,"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", "1GiB,,2GiB"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", "1GiB,"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", ""], USAGE, "--budgets"),
    ("hitratio", ["--budgets", "nan"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", "inf"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", "1e30"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", "99999999999999999999999GiB"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", "-1GiB"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", "1GiBx"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", "1.2.3MiB"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", "2000TiB"], USAGE, "--budgets"),
    ("hitratio", ["--budgets", ",".join(["1MiB"] * 65)], USAGE, "--budgets"),
    ("hitratio", HR_SMALL + ["--budgets", "1e40tok"], USAGE, "--budgets"),
    ("hitratio", ["--docs", "12abc"], USAGE, "--docs"),
    ("hitratio", ["--docs", "2147483648"], USAGE, "--docs"),
    ("hitratio", ["--docs", "99999999999999999999999"], USAGE, "--docs"),
    ("hitratio", ["--docs", "-5"], USAGE, "--docs"),
    ("hitratio", ["--docs", " 5"], USAGE, "--docs"),
    ("hitratio", ["--docs"], USAGE, "--docs"),
    ("hitratio", ["--docs", "5", "--docs", "6"], USAGE, "--docs"),
    ("hitratio", ["--docs", "1000000", "--doc-len", "1000000"], USAGE, "--docs"),
    ("hitratio", ["--k", "7", "--docs", "6"], USAGE, "--k"),
    ("hitratio", ["--alpha", "nan"], USAGE, "--alpha"),
    ("hitratio", ["--alpha", "inf"], USAGE, "--alpha"),
    ("hitratio", ["--alpha", "1e400"], USAGE, "--alpha"),
    ("hitratio", ["--alpha", "0x10"], USAGE, "--alpha"),
    ("hitratio", ["--alpha", "0"], USAGE, "--alpha"),
    ("hitratio", ["--dtype", "f8"], USAGE, "--dtype"),
    ("hitratio", ["--preset", "bogus"], USAGE, "--preset"),
    ("hitratio", ["--points", "1"], USAGE, "--points"),
    ("hitratio", ["--requests", "0"], USAGE, "--requests"),
    ("hitratio", ["--warmup", "10", "--requests", "5"], USAGE, "--warmup"),
    ("hitratio", ["--seed", "-1"], USAGE, "--seed"),
    ("hitratio", ["--question", "5-2"], USAGE, "--question"),
    ("hitratio", ["--gen", "1-x"], USAGE, "--gen"),
    ("hitratio", ["--doc-len", "32", "--doc-len-min", "8"], USAGE, "--doc-len"),
    ("hitratio", ["--doc-len-min", "64", "--doc-len-max", "32"], USAGE, "--doc-len-min"),
    ("hitratio", ["--block-size", "257"], USAGE, "--block-size"),
    ("hitratio", ["--layers", "0"], USAGE, "--layers"),
    ("hitratio", ["--quiet=1"], USAGE, "--quiet"),
    ("hitratio", ["--csv", "--quiet"], USAGE, "--csv"),
    ("hitratio", ["--frobnicate"], USAGE, "--frobnicate"),
    ("hitratio", ["stray"], USAGE, "stray"),
    ("hitratio", HR_SMALL + ["--budgets", "100B"], USAGE, "--budgets"),
    ("hitratio", HR_SMALL + ["--budgets", "16KiB", "--csv", "no/such/dir/x.csv", "--svg", ""],
     FAILED, "no/such/dir/x.csv"),
    # hitratio: seeds, tier, length laws, drift, sampler
    ("hitratio", ["--seeds", "0"], USAGE, "--seeds"),
    ("hitratio", ["--seeds", "1001"], USAGE, "--seeds"),
    ("hitratio", ["--seeds", "3x"], USAGE, "--seeds"),
    ("hitratio", ["--seed", "18446744073709551615", "--seeds", "2"], USAGE, "--seeds"),
    ("hitratio", ["--tier-budgets", ""], USAGE, "--tier-budgets"),
    ("hitratio", ["--tier-budgets", "1GiB,,2GiB"], USAGE, "--tier-budgets"),
    ("hitratio", ["--tier-budgets", "-1GiB"], USAGE, "--tier-budgets"),
    ("hitratio", ["--tier-budgets", "nan"], USAGE, "--tier-budgets"),
    ("hitratio", ["--tier-budgets", "2000TiB"], USAGE, "--tier-budgets"),
    ("hitratio", ["--tier-budgets", ",".join(["%dMiB" % i for i in range(1, 10)])], USAGE,
     "--tier-budgets"),
    ("hitratio", ["--tier-write", "sideways", "--tier-budgets", "1GiB"], USAGE, "--tier-write"),
    ("hitratio", ["--tier-write", "through"], USAGE, "--tier-write"),
    ("hitratio", ["--doc-dist", "gamma"], USAGE, "--doc-dist"),
    ("hitratio", ["--doc-dist", "lognormal", "--doc-sigma", "nan"], USAGE, "--doc-sigma"),
    ("hitratio", ["--doc-dist", "lognormal", "--doc-sigma", "-1"], USAGE, "--doc-sigma"),
    ("hitratio", ["--doc-dist", "lognormal", "--doc-sigma", "5"], USAGE, "--doc-sigma"),
    ("hitratio", ["--doc-dist", "lognormal", "--doc-mean", "0"], USAGE, "--doc-mean"),
    ("hitratio", ["--doc-dist", "lognormal", "--doc-mean", "inf"], USAGE, "--doc-mean"),
    ("hitratio", ["--doc-sigma", "1"], USAGE, "--doc-sigma"),
    ("hitratio", ["--doc-dist", "lognormal", "--doc-long-min", "100"], USAGE, "--doc-long-min"),
    ("hitratio", ["--doc-dist", "bimodal", "--doc-long-fraction", "1.5"], USAGE,
     "--doc-long-fraction"),
    ("hitratio", ["--doc-dist", "bimodal", "--doc-long-fraction", "nan"], USAGE,
     "--doc-long-fraction"),
    ("hitratio", ["--doc-dist", "bimodal", "--doc-len-min", "10", "--doc-len-max", "100",
                  "--doc-short-max", "200"], USAGE, "--doc-short-max"),
    ("hitratio", ["--doc-dist", "bimodal", "--doc-len-min", "10", "--doc-len-max", "100",
                  "--doc-long-min", "5"], USAGE, "--doc-long-min"),
    ("hitratio", ["--drift-at", "-1"], USAGE, "--drift-at"),
    ("hitratio", ["--drift-at", "0"], USAGE, "--drift-at"),
    ("hitratio", ["--drift-at", "200"], USAGE, "--drift-at"),
    ("hitratio", ["--sampler", "uniform"], USAGE, "--sampler"),
    ("hitratio", ["--prompts", "10"], USAGE, "--prompts"),
    ("hitratio", ["--sampler", "paper-fixed-prompts", "--prompts", "0"], USAGE, "--prompts"),
    ("hitratio", ["--sampler", "paper-fixed-prompts", "--prompts", "1e3"], USAGE, "--prompts"),
    # rag_bench
    ("rag_bench", ["--requests", "-5"], USAGE, "--requests"),
    ("rag_bench", ["--requests", "0"], USAGE, "--requests"),
    ("rag_bench", ["--rate", "1e-300"], USAGE, "--rate"),
    ("rag_bench", ["--rate", "nan"], USAGE, "--rate"),
    ("rag_bench", ["--rate", "0"], USAGE, "--rate"),
    ("rag_bench", ["--rate", "2", "--concurrency", "3"], USAGE, "--rate"),
    ("rag_bench", ["--budget", "1e30"], USAGE, "--budget"),
    ("rag_bench", ["--budget", "nan"], USAGE, "--budget"),
    ("rag_bench", ["--budget", ","], USAGE, "--budget"),
    ("rag_bench", ["--budget", "1"], USAGE, "--budget"),
    ("rag_bench", ["--policies", "lazy,,none"], USAGE, "--policies"),
    ("rag_bench", ["--policies", "lazy,lazy"], USAGE, "--policies"),
    ("rag_bench", ["--policies", "bogus"], USAGE, "--policies"),
    ("rag_bench", ["--max-batch", "0"], USAGE, "--max-batch"),
    ("rag_bench", ["--concurrency", "0"], USAGE, "--concurrency"),
    ("rag_bench", ["--k", "0"], USAGE, "--k"),
    ("rag_bench", ["--k", "30"], USAGE, "--k"),
    ("rag_bench", ["--model", "huge"], USAGE, "--model"),
    ("rag_bench", ["--workload", "bogus"], USAGE, "--workload"),
    ("rag_bench", ["--progress", "--no-progress"], USAGE, "--progress"),
    ("rag_bench", ["--run-seconds", "-1"], USAGE, "--run-seconds"),
    ("rag_bench", ["--doc-len", "5:2"], USAGE, "--doc-len"),
    ("rag_bench", ["--question", "0:4"], USAGE, "--question"),
    ("rag_bench", ["--seed", "1x"], USAGE, "--seed"),
    ("rag_bench", ["--max-rows", "70000"], USAGE, "--max-rows"),
    ("rag_bench", ["--gguf", ""], USAGE, "--gguf"),
    ("rag_bench", ["--gguf", "x.gguf", "--model", "tiny"], USAGE, "--gguf"),
    ("rag_bench", ["--out"], USAGE, "--out"),
    ("rag_bench", ["--out", "x" * 901], USAGE, "--out"),
    ("rag_bench", ["extra"], USAGE, "extra"),
    ("rag_bench", ["--no-batched-prefil"], USAGE, "--no-batched-prefil"),
    ("rag_bench", ["--no-batched-prefill=1"], USAGE, "--no-batched-prefill"),
    ("rag_bench", ["--gemm", "f16"], USAGE, "--gemm"),
    ("rag_bench", ["--gemm", ""], USAGE, "--gemm"),
    ("rag_bench", ["--gemm", "BF16"], USAGE, "--gemm"),
    ("rag_bench", ["--gemm"], USAGE, "--gemm"),
    ("rag_bench", ["--gemm", "bf16", "--gemm", "f32"], USAGE, "--gemm"),
    ("rag_bench", ["--prefill-chunk", "-1"], USAGE, "--prefill-chunk"),
    ("rag_bench", ["--prefill-chunk", "70000"], USAGE, "--prefill-chunk"),
    ("rag_bench", ["--model", "tiny", "--prefill-chunk", "5"], USAGE, "--prefill-chunk"),
    ("rag_bench", ["--time-limit", "0"], USAGE, "--time-limit"),
    ("rag_bench", ["--time-limit", "nan"], USAGE, "--time-limit"),
    ("rag_bench", ["--retained-budget=1"], USAGE, "--retained-budget"),
    ("rag_bench", ["--tier", "dir:x", "--processes", "2", "--time-limit", "60"], USAGE,
     "--time-limit"),
    ("rag_bench", ["--tier-write-queue", "4"], USAGE, "--tier-write-queue"),
    ("rag_bench", ["--tier", "host:1MiB", "--tier-write-queue", "1025"], USAGE,
     "--tier-write-queue"),
    ("rag_bench", ["--tier", "host:1MiB", "--tier-write-queue", "-1"], USAGE,
     "--tier-write-queue"),
    ("rag_bench", ["--tier-cost"], USAGE, "--tier-cost"),
    ("rag_bench", ["--tier-load", "sync"], USAGE, "--tier-load"),
    ("rag_bench", ["--tier", "host:1MiB", "--tier-load", "later"], USAGE, "--tier-load"),
    # the largest budget and the working sets in flight past 1 PiB: refused before any run
    ("rag_bench", RB_SMALL + ["--budget", "1024TiB", "--retained-budget"], USAGE,
     "--retained-budget"),
    ("rag_bench", ["--gguf", "no-such-file.gguf"], FAILED, "no-such-file.gguf"),
    # every request refused: 4 KiB holds one block of the tiny model, a request needs more
    ("rag_bench", RB_SMALL + ["--budget", "4KiB"], FAILED, "completed none"),
    # a rate so low that nothing arrives before --run-seconds: ends, and says nothing was done
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--rate", "0.001", "--run-seconds", "0.2"],
     FAILED, "completed none"),
    # rag_bench's document tier (--tier, --tier-mode, --processes)
    ("rag_bench", ["--tier", "bogus:1"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "host:0"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "host:1x"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "dir:"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://127.0.0.1"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://127.0.0.1:0"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://127.0.0.1:99999"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://127.0.0.1:12ab"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://:80"], USAGE, "--tier"),
    # the port digits only; an IPv6 address in brackets
    ("rag_bench", ["--tier", "redis://127.0.0.1:+6379"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://127.0.0.1: 6379"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://127.0.0.1:6379 "], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://::1:6379"], USAGE, "brackets"),
    ("rag_bench", ["--tier", "redis://[::1"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://[::1]"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://[]:6379"], USAGE, "--tier"),
    ("rag_bench", ["--tier", "redis://[::1]:65536"], USAGE, "--tier"),
    # the brackets' address is what hiredis is given (it resolved "[::1]" and failed before)
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier", "redis://[::1]:1"], FAILED,
     "redis ::1:1:"),
    ("rag_bench", ["--tier", "host:1MiB", "--policies", "lazy,position"], USAGE, "--tier"),
    ("rag_bench", ["--tier-mode", "back"], USAGE, "--tier-mode"),
    ("rag_bench", ["--tier", "host:1MiB", "--tier-mode", "sideways"], USAGE, "--tier-mode"),
    ("rag_bench", ["--processes", "2"], USAGE, "--processes"),
    ("rag_bench", ["--tier", "host:1MiB", "--processes", "2"], USAGE, "--processes"),
    ("rag_bench", ["--tier", "dir:x", "--processes", "0"], USAGE, "--processes"),
    ("rag_bench", ["--tier", "rediss://127.0.0.1:6380"], USAGE, "TLS terminator"),
    ("rag_bench", ["--tier", "redis://127.0.0.1:1,"], USAGE, "--tier"),
    ("rag_bench", ["--tier-password-file", "pw"], USAGE, "--tier-password-file"),
    ("rag_bench", ["--tier", "dir:x", "--tier-password-file", "pw"], USAGE, "redis:// only"),
    ("rag_bench", ["--tier", "redis://127.0.0.1:1", "--tier-password-file", "no-such-pw"], USAGE,
     "no-such-pw"),
    ("rag_bench", ["--tier", "dir:x", "--processes", "65"], USAGE, "--processes"),
    ("rag_bench", ["--tier", "dir:x", "--processes", "2", "--budget", "1MiB,2MiB"], USAGE,
     "--processes"),
    ("rag_bench", ["--tier", "dir:x", "--processes", "2", "--tier-mode", "read"], USAGE,
     "--tier-mode"),
    ("rag_bench", ["--tier", "dir:x", "--rounds", "2"], USAGE, "--rounds"),
    # --processes writes no files: --out is refused, not ignored
    ("rag_bench", ["--tier", "dir:x", "--processes", "2", "--out", "rb"], USAGE, "--out"),
    ("rag_bench", ["--tier", "dir:x", "--processes", "2", "--rounds", "0"], USAGE, "--rounds"),
    # --devices: one workload split among a process per device (tests/test_rag_devices.py runs it)
    ("rag_bench", ["--devices", "0,1"], USAGE, "--devices"),
    ("rag_bench", ["--tier", "host:1MiB", "--devices", "0"], USAGE, "--devices"),
    ("rag_bench", ["--tier", "dir:x", "--devices", ""], USAGE, "--devices"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "0,,1"], USAGE, "--devices"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "0,"], USAGE, "--devices"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "-1"], USAGE, "--devices"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "#0"], USAGE, "--devices"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "99999999999"], USAGE, "--devices"),
    ("rag_bench", ["--tier", "dir:x", "--devices", ",".join(["0"] * 65)], USAGE, "--devices"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "0", "--processes", "2"], USAGE, "--devices"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "0", "--budget", "1MiB,2MiB"], USAGE,
     "--devices"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "0", "--out", "rb"], USAGE, "--out"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "0", "--rounds", "2"], USAGE, "--rounds"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "0", "--time-limit", "60"], USAGE,
     "--time-limit"),
    ("rag_bench", ["--tier", "dir:x", "--devices", "0", "--balance", "random"], USAGE,
     "--balance"),
    ("rag_bench", ["--tier", "dir:x", "--balance", "rr"], USAGE, "--balance"),
    # a device that does not exist: its process fails, the run says so (exit 1)
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier", "dir:tiernodev", "--devices",
                              "0,999"], FAILED, "device #999"),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier", "dir:/proc/version"], FAILED,
     "not a directory"),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier", "redis://127.0.0.1:1"], FAILED,
     "redis"),
    # processes whose runs --run-seconds cuts short: the table marks them, exit 3
    ("rag_bench", [a if a != "2" or i != 3 else "100000" for i, a in enumerate(RB_SMALL)] +
     ["--budget", "64KiB", "--tier", "dir:tiercut", "--processes", "2", "--run-seconds", "1"], 3,
     "INCOMPLETE"),
    # bench_kernels (needs a GPU to run; its command line is checked first)
    ("bench_kernels", ["--reps", "5"], USAGE, "--reps"),
    ("bench_kernels", ["--reps", "1e3"], USAGE, "--reps"),
    ("bench_kernels", ["--only", "both"], USAGE, "--only"),
    ("bench_kernels", ["--csv"], USAGE, "--csv"),
    ("bench_kernels", ["--no-checks", "--no-checks"], USAGE, "--no-checks"),
    ("bench_kernels", ["--csv", "no/such/dir/x.csv"], FAILED, "no/such/dir/x.csv"),
    ("bench_kernels", ["--fast"], USAGE, "--fast"),
    ("bench_kernels", ["--prefill-queries", "100"], USAGE, "multiple of the block size"),
    ("bench_kernels", ["--prefill-queries", "8192"], USAGE, "--prefill-queries"),
    ("bench_kernels", ["--prefill-queries", "0"], USAGE, "--prefill-queries"),
    ("bench_kernels", ["--only", "prefill_d"], USAGE, "--only"),
    ("bench_kernels", ["--only", "prefill_b", "--prefill-queries", "480"], USAGE, "--prefill-queries"),
    ("bench_kernels", ["--only", "decode_1x32768", "--prefill-queries", "480"], USAGE, "--prefill-queries"),
    ("bench_kernels", ["--kv-layout", "tile"], USAGE, "--kv-layout"),
    ("bench_kernels", ["--kv-layout"], USAGE, "--kv-layout"),
    # programs without options
    ("quickstart", ["--verbose"], USAGE, "--verbose"),
    ("quickstart", ["extra"], USAGE, "extra"),
    ("cache_path", ["--verbose"], USAGE, "--verbose"),
    ("cache_path", ["extra"], USAGE, "extra"),
    ("list_devices", ["--all"], USAGE, "--all"),
    ("list_devices", ["extra"], USAGE, "extra"),
    ("tune_kernels", ["--reps", "0"], USAGE, "--reps"),
    ("tune_kernels", ["--head-dim", "12x"], USAGE, "--head-dim"),
    ("tune_kernels", ["--dtype", "f64"], USAGE, "--dtype"),
    ("tune_kernels", ["--block"], USAGE, "--block"),
    ("tune_kernels", ["--bogus"], USAGE, "--bogus"),
    ("probe_wgmma_layout", ["--layout", "1"], USAGE, "--layout"),
    # the GEMM benchmarks (serve/): refused before any device work
    ("bench_gemm", ["--rows", " 5"], USAGE, "--rows"),
    ("bench_gemm", ["--rows", "1,,2"], USAGE, "--rows"),
    ("bench_gemm", ["--rows", "99999999999"], USAGE, "--rows"),
    ("bench_gemm", ["--rows", "16,16"], USAGE, "--rows"),
    ("bench_gemm", ["--tiles", ";"], USAGE, "--tiles"),
    ("bench_gemm", ["--tiles", "1,2,128,32,3,0,16;"], USAGE, "--tiles"),
    ("bench_gemm", ["--tiles", ";".join(["1,2,128,32,3,0,16"] * 17)], USAGE, "--tiles"),
    ("bench_gemm", ["--tiles", "1,2,128,32,3,0,16x"], USAGE, "--tiles"),
    ("bench_gemm", ["--tiles", "1,2,128,32,4,0,16"], USAGE, "--tiles"),
    ("bench_gemm", ["--only", "qkv,qkv"], USAGE, "--only"),
    ("bench_gemm", ["--peer", "no-such-file.csv"], USAGE, "--peer"),
    ("bench_gemm_small", ["--reps", "0"], USAGE, "--reps"),
    ("bench_gemm_small", ["--reps", "201"], USAGE, "--reps"),
    ("bench_gemm_small", ["--reps", "5x"], USAGE, "--reps"),
    ("bench_gemm_small", ["--ms", "1,x"], USAGE, "--ms"),
    ("bench_gemm_small", ["--ms", "0"], USAGE, "--ms"),
    ("bench_gemm_small", ["--ms", "65"], USAGE, "--ms"),
    ("bench_gemm_small", ["--ms", "1,"], USAGE, "--ms"),
    ("bench_gemm_small", ["--ms", "1,1"], USAGE, "--ms"),
    ("bench_gemm_small", ["--ms", ",".join(str(i) for i in range(1, 18))], USAGE, "--ms"),
    ("bench_gemm_small", ["--variant", "1,1,8,8,0,2"], USAGE, "--variant"),
    ("bench_gemm_small", ["--variant", "1,1,8,8,0,2,-1"], USAGE, "--variant"),
    ("bench_gemm_small", ["--variant", "1,1,8,8,0,2,0,0,0"], USAGE, "--variant"),
    ("bench_gemm_small", ["--variant", "1,1,8,8,0,2,0;"], USAGE, "--variant"),
    ("bench_gemm_small", ["--variant", "defaults", "--variant", "defaults"], USAGE, "--variant"),
    ("bench_gemm_small", ["--no-checks=1"], USAGE, "--no-checks"),
    ("bench_gemm_small", ["extra"], USAGE, "extra"),
    ("probe_wgmma_rs", ["--n", "64"], USAGE, "--n"),
    ("probe_wgmma_rate", ["--iters", "8"], USAGE, "--iters"),
    ("probe_wgmma_rate", ["extra"], USAGE, "extra"),
    ("probe_tier_load", ["--docs", "0"], USAGE, "--docs"),
    ("probe_tier_load", ["--layout", "cols"], USAGE, "--layout"),
    ("probe_tier_load", ["extra"], USAGE, "extra"),
    # bench_forward (its decode steps)
    ("bench_forward", ["--decode", "0"], USAGE, "--decode"),
    ("bench_forward", ["--decode", "257"], USAGE, "--decode"),
    ("bench_forward", ["--decode", "1,,2"], USAGE, "--decode"),
    ("bench_forward", ["--decode", "1,"], USAGE, "--decode"),
    ("bench_forward", ["--decode", "1, 2"], USAGE, "--decode"),
    ("bench_forward", ["--decode", "-1"], USAGE, "--decode"),
    ("bench_forward", ["--decode", "16,16"], USAGE, "--decode"),
    ("bench_forward", ["--decode", "1,2,3,4,5,6,7,8,9"], USAGE, "--decode"),
    ("bench_forward", ["--decode-context", "0"], USAGE, "--decode-context"),
    ("bench_forward", ["--decode-context", "65536"], USAGE, "--decode-context"),
    ("bench_forward", ["--model", "tiny", "--max-rows", "16", "--decode", "17"], USAGE, "--max-rows"),
    ("bench_forward", ["--device-time=1"], USAGE, "--device-time"),
    ("bench_forward", ["extra"], USAGE, "extra"),
    ("bench_forward", ["--gguf", "x.gguf", "--model", "tiny"], USAGE, "--gguf"),
    ("bench_forward", ["--gguf", "no-such-file.gguf"], FAILED, "no-such-file.gguf"),
    ("bench_forward", ["--dequantize=1"], USAGE, "--dequantize"),
    ("bench_forward", ["--device-trace", "t.csv"], USAGE, "--device-time"),
    ("bench_forward", ["--device-time", "--device-trace", "no-such-dir/t.csv"], FAILED,
     "no-such-dir/t.csv"),
    # bench_gemv_quant (the kernels of weights kept quantized)
    ("bench_gemv_quant", ["--reps", "0"], USAGE, "--reps"),
    ("bench_gemv_quant", ["--rows", "9"], USAGE, "--rows"),
    ("bench_gemv_quant", ["--rows", "1,,8"], USAGE, "--rows"),
    ("bench_gemv_quant", ["--types", "q4_k,q2_k"], USAGE, "q2_k"),
    ("bench_gemv_quant", ["--types", ""], USAGE, "--types"),
    ("bench_gemv_quant", ["extra"], USAGE, "extra"),
    ("tokenize", ["--text", "hi"], USAGE, "--gguf"),
    ("tokenize", ["--gguf", TOK_LLAMA3], USAGE, "--text"),
    ("tokenize", ["--gguf", TOK_LLAMA3, "--text", "hi", "--template", "gemma"], USAGE, "--template"),
    ("tokenize", ["--gguf", TOK_LLAMA3, "--text", "hi", "--system", "be brief"], USAGE, "--system"),
    ("tokenize", ["--gguf", TOK_LLAMA3, "--text", "hi", "--template", "llama3", "--no-special"],
     USAGE, "--no-special"),
    ("tokenize", ["--gguf", "missing.gguf", "--text", "hi"], FAILED, "missing.gguf"),
    # a model file without tokenizer keys (tools/gguf_fixtures.py's)
    ("tokenize", ["--gguf", NO_TOKENIZER, "--text", "hi"], FAILED, "tokenizer.ggml.model"),
]

GOOD = [
    # (program, arguments, files it must write)
    ("tokenize", ["--gguf", TOK_LLAMA3, "--text", "Hello world <|eot_id|>"], []),
    ("tokenize", ["--gguf", TOK_LLAMA3, "--text", "Hi", "--template", "auto", "--system", "brief",
                  "--pieces"], []),
    ("tokenize", ["--gguf", TOK_SPM, "--text", "", "--template", "mistral", "--no-bos"], []),
    ("tokenize", ["--gguf", TOK_QWEN2, "--text", "12345", "--template", "auto"], []),
    ("tokenize", ["--gguf", TOK_SPM, "--text", "<s> as text", "--no-special", "--pieces"], []),
    ("hitratio", HR_SMALL + ["--budgets", "4KiB,16KiB,64tok", "--csv", "h.csv", "--svg", "h.svg"],
     ["h.csv", "h.svg"]),
    ("hitratio", HR_SMALL + ["--points", "3", "--csv=", "--svg", ""], []),
    ("hitratio", ["--help"], []),
    ("bench_forward", ["--model", "tiny", "--no-forwards", "--decode", "1,3", "--decode-context", "40",
                       "--warmup", "0", "--reps", "1", "--device-time"], []),
    # (HR_SMALL without --doc-len: lengths from a law)
    ("hitratio", HR_SMALL[:2] + HR_SMALL[4:] +
     ["--budgets", "4KiB,16KiB", "--seeds", "3", "--tier-budgets", "0,8KiB,64tok", "--tier-write",
      "through", "--doc-len-min", "8", "--doc-len-max", "64", "--doc-dist", "lognormal",
      "--doc-sigma", "0.8", "--drift-at", "4", "--csv", "t.csv", "--svg", "t.svg"],
     ["t.csv", "t.svg"]),
    ("hitratio", HR_SMALL[:2] + HR_SMALL[4:] +
     ["--budgets", "4KiB", "--sampler", "paper-fixed-prompts", "--prompts", "3", "--tier-budgets",
      "16KiB", "--doc-len-min", "8", "--doc-len-max", "64", "--doc-dist", "bimodal", "--csv", "",
      "--svg", ""], []),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--out", "rb"],
     ["rb.csv", "rb_summary.csv", "rb_ttft.svg", "rb_budget.svg"]),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier", "host:1MiB", "--tier-mode", "back",
                              "--out", "rbt"], ["rbt.csv"]),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier", "dir:tierw", "--tier-write-queue", "2",
                              "--tier-cost"], []),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier", "host:1MiB", "--tier-load", "sync"],
     []),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier", "host:1MiB", "--tier-load",
                              "pipelined"], []),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier", "dir:tier", "--processes", "2",
                              "--rounds", "2"], []),
    # the per-segment prefill path and host tables, and batched prefill in chunks of one block
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--no-batched-prefill", "--no-device-plans"], []),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--max-rows", "16"], []),
    # fewer rows per forward than a block: the engine takes the per-segment path
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--max-rows", "5"], []),
    # the projection paths: bf16 weights through the portable bf16 kernel (PoCL), f32 CLBlast
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--gemm", "bf16"], []),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--gemm", "f32", "--max-rows", "16"], []),
    # chunked prefill of one block with decode steps between, and retained budgets
    ("rag_bench", ["lazy,none" if a == "lazy" else a for a in RB_SMALL] +
     ["--budget", "16KiB,64KiB", "--prefill-chunk", "16", "--retained-budget", "--out", "rbc"],
     ["rbc.csv", "rbc_summary.csv", "rbc_ttft_budgets.svg"]),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--prefill-chunk", "0"], []),
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--no-batched-prefill", "--prefill-chunk", "16",
                              "--warmup", "2", "--time-limit", "600"], []),
    ("rag_bench", ["--help"], []),
    ("bench_kernels", ["--help"], []),
    ("quickstart", [], []),
    ("quickstart", ["-h"], []),
    ("cache_path", ["--help"], []),
    ("list_devices", [], []),
    ("list_devices", ["-h"], []),
    ("tune_kernels", ["--help"], []),
    ("probe_wgmma_layout", ["--help"], []),
    ("bench_gemm", ["--help"], []),
    ("bench_gemm_small", ["--help"], []),
    ("probe_wgmma_rs", ["--help"], []),
    ("probe_wgmma_rate", ["--help"], []),
    ("probe_tier_load", ["--docs", "2", "--tokens", "32", "--rounds", "1"], []),
]

# Runs the time limit cuts short: results written, the runs marked (complete=0 in the summary
# CSV), exit 3. After GOOD, so that PoCL has built the kernels: a limit shorter than a cold
# build would leave no time for any request (exit 1). RB_SMALL with 100000 requests.
RB_MANY = [a if a != "2" or i != 3 else "100000" for i, a in enumerate(RB_SMALL)]
CUT = [
    (RB_MANY + ["--budget", "64KiB", "--time-limit", "8", "--out", "rbcut"], "rbcut"),
    # Poisson arrivals, and a warm-up whose time comes out of the run's share
    (RB_MANY + ["--budget", "64KiB", "--rate", "200", "--warmup", "4", "--time-limit", "6",
                "--out", "rbcutr"], "rbcutr"),
]

# Cases that must end within a time (seconds), after GOOD (kernels built): (program, arguments,
# expected exit status, text stderr must contain, seconds).
TIMED = [
    # a bad output path is refused before the sweep (it was opened after it, the row lost)
    ("tune_kernels", ["--out", "no/such/dir/row"], FAILED, "no/such/dir/row", 30),
    # --run-seconds bounds the rounds: none starts after it (100 rounds took minutes)
    ("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier", "dir:tierrounds", "--processes", "2",
                              "--rounds", "100", "--run-seconds", "1"], 3, "rounds run", 90),
    # --devices: --run-seconds stops the dispatch; the table marks the phases, exit 3
    ("rag_bench", RB_MANY + ["--budget", "64KiB", "--tier", "dir:tiercutdev", "--devices", "0,0",
                             "--run-seconds", "1"], 3, "stopped the dispatch", 90),
]

# Two serving processes sharing Redis, where a server is given (CI starts one).
if os.environ.get("LAZYATTN_TEST_REDIS"):
    GOOD.append(("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier",
                                          "redis://" + os.environ["LAZYATTN_TEST_REDIS"],
                                          "--processes", "2"], []))
# ... and a Redis Cluster through one of its nodes (tools/redis_test_servers.sh starts one).
if os.environ.get("LAZYATTN_TEST_REDIS_CLUSTER"):
    GOOD.append(("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier",
                                          "redis://" +
                                          os.environ["LAZYATTN_TEST_REDIS_CLUSTER"].split(",")[-1],
                                          "--processes", "2"], []))


def run(path, args, cwd, timeout=600):
    return subprocess.run([path] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, errors="replace", timeout=timeout)


def redis_on_ipv6_loopback():
    """A redis-server of our own on [::1] (CI's listens on 127.0.0.1), stopped at exit: its port,
    or None and why not."""
    if not shutil.which("redis-server"):
        return None, "no redis-server"
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
            port = probe.getsockname()[1]
    except OSError as e:
        return None, "no IPv6 loopback (%s)" % e
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "::1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    atexit.register(lambda: (proc.terminate(), proc.wait()))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("::1", port), timeout=1).close()
            return port, None
        except OSError:
            time.sleep(0.05)
    return None, "redis-server did not listen on [::1]:%d" % port


def main():
    programs = dict(a.split("=", 1) for a in sys.argv[1:])
    failures, checked = [], 0
    good = list(GOOD)
    if "rag_bench" in programs:
        # an IPv6 literal's run end to end (the bad cases show only that hiredis is given ::1)
        port, why = redis_on_ipv6_loopback()
        if port:
            good.append(("rag_bench", RB_SMALL + ["--budget", "64KiB", "--tier",
                                                  "redis://[::1]:%d" % port], []))
        else:
            print("skip rag_bench --tier redis://[::1]:PORT: %s" % why)
    with tempfile.TemporaryDirectory(prefix="lazyattn_cli_") as cwd:
        for prog, args, want, needle in BAD:
            if prog not in programs:
                continue
            checked += 1
            r = run(programs[prog], args, cwd)
            line = "%s %s" % (prog, " ".join(repr(a) if not a or " " in a else a for a in args))
            if r.returncode != want or needle not in r.stderr:
                failures.append("%s: exit %d (want %d), stderr %r lacks %r or is otherwise wrong"
                                % (line, r.returncode, want, r.stderr[-400:], needle))
            elif "AddressSanitizer" in r.stderr or "runtime error" in r.stderr:
                failures.append("%s: sanitizer report: %s" % (line, r.stderr[-800:]))
            else:
                print("ok   %-70.70s exit %d: %s" % (line, r.returncode,
                                                     r.stderr.strip().splitlines()[-1][:90]))
        for prog, args, files in good:
            if prog not in programs:
                continue
            checked += 1
            for f in files:
                if os.path.exists(os.path.join(cwd, f)):
                    os.remove(os.path.join(cwd, f))
            r = run(programs[prog], args, cwd)
            line = "%s %s" % (prog, " ".join(args))
            missing = [f for f in files if not os.path.getsize(os.path.join(cwd, f))
                       ] if all(os.path.exists(os.path.join(cwd, f)) for f in files) else files
            if r.returncode != 0 or missing or "runtime error" in r.stderr:
                failures.append("%s: exit %d, missing/empty %s, stderr %r"
                                % (line, r.returncode, missing, r.stderr[-800:]))
            elif args and args[-1] in ("--help", "-h") and "usage:" not in r.stdout:
                failures.append("%s: no usage on stdout" % line)
            else:
                print("ok   %-70.70s exit 0" % line)
        for prog, args, want, needle, seconds in TIMED:
            if prog not in programs:
                continue
            checked += 1
            line = "%s %s" % (prog, " ".join(args))
            try:
                r = run(programs[prog], args, cwd, timeout=seconds)
            except subprocess.TimeoutExpired:
                failures.append("%s: still running after %d s" % (line, seconds))
                continue
            if r.returncode != want or needle not in r.stderr:
                failures.append("%s: exit %d (want %d), stderr %r lacks %r"
                                % (line, r.returncode, want, r.stderr[-400:], needle))
            else:
                print("ok   %-70.70s exit %d within %d s" % (line, r.returncode, seconds))
        for args, prefix in CUT if "rag_bench" in programs else []:
            checked += 1
            r = run(programs["rag_bench"], args, cwd)
            line = "rag_bench %s" % " ".join(args)
            try:
                with open(os.path.join(cwd, prefix + "_summary.csv")) as f:
                    rows = list(csv.DictReader(f))
            except OSError:
                rows = []
            bad = [row for row in rows if row["complete"] != "0" or row["planned"] != "100000"
                   or int(row["requests"]) + int(row["failed"]) >= 100000]
            if r.returncode != 3 or "INCOMPLETE" not in r.stderr or not rows or bad:
                failures.append("%s: exit %d (want 3), summary %r, stderr %r"
                                % (line, r.returncode, rows[:2], r.stderr[-400:]))
            else:
                print("ok   %-70.70s exit 3, %s of 100000 requests, complete=0"
                      % (line, rows[0]["requests"]))
    for f in failures:
        print("FAIL " + f)
    print("%d cases, %d failed" % (checked, len(failures)))
    if checked == 0:
        print("no program given")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

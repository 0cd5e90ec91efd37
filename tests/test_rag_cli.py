#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""lazyattn-rag end to end on the fixture model (tests/fixtures/rag_llama3.gguf,
tools/rag_fixture.py: random weights, a real tokenizer, answers that depend on
every prompt token).

What is compared:
  1. run 1, documents a, b, a fresh --cache-dir: every document token prefilled
     (the report's count equals the documents' token count), none reused;
  2. run 2, documents b, a, the same --cache-dir (a new process): 0 document
     tokens prefilled, all of them loaded from the store; its stdout (the
     greedy answer) byte for byte equal to
  3. run 3, documents b, a, --policy lazy --no-store: one process that
     prefills both documents itself;
  and, so that 2 = 3 means something, run 3's answer differs from run 1's (the
  order changes the answer) and from --policy none's (whole-prompt attention
  changes it: README's accuracy note).
  4. the default store directory under $XDG_CACHE_HOME; seeded sampling
     repeatable; the question from stdin; a --batch JSONL file (lines a, b and
     b, a in one process: the second prefills 0 document tokens, the answers
     are runs 1's and 3's).
  5. bad inputs: exit status and the message (the file, the key, the budget,
     a closed or gone stdout, bad command lines).

usage: test_rag_cli.py PROGRAM
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
MODEL = os.path.join(FIXTURES, "rag_llama3.gguf")
DOC_A = "The cache keeps documents.\nTokens and kernels live in OpenCL.\n"
DOC_B = "Llama models decode the attention of a tensor.\n"
QUESTION = "What does the cache keep?"
REPORT = re.compile(r"documents: (\d+) \((\d+) tokens\): (\d+) prefilled, (\d+) reused "
                    r"\((\d+) cached in this process, (\d+) copied, (\d+) from the store")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(prog, args, env, stdin=None, **kw):
    r = subprocess.run([prog, "--model", MODEL, "--max-tokens", "12", "--no-progress"] + args,
                       input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                       timeout=300, **kw)
    return r.returncode, r.stdout, r.stderr.decode("utf-8", "replace")


def json_text(b):
    """Bytes as lazyattn-rag's JSON strings hold them: each byte that starts no valid UTF-8
    character becomes U+FFFD."""
    out, i = [], 0
    while i < len(b):
        c = b[i]
        k = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 0
        try:
            ch = b[i:i + k].decode("utf-8") if k else ""
        except UnicodeDecodeError:
            ch = ""
        if len(ch) == 1:
            out.append(ch)
            i += k
        else:
            out.append("\ufffd")
            i += 1
    return "".join(out)


def report(err):
    m = REPORT.search(err)
    return [int(x) for x in m.groups()] if m else None


def main():
    prog = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="lazyattn-rag-")
    try:
        # runs that name --cache-dir or --no-store keep the environment (PoCL's kernel cache);
        # the others get a scratch cache home, so nothing lands in the user's
        env = dict(os.environ)
        env_xdg = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg"))
        home_cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        env_xdg.setdefault("POCL_CACHE_DIR", os.path.join(home_cache, "pocl", "kcache"))
        a, b = os.path.join(tmp, "a.txt"), os.path.join(tmp, "b.txt")
        open(a, "w").write(DOC_A)
        open(b, "w").write(DOC_B)
        store = os.path.join(tmp, "store")

        st, out1, err = run(prog, ["--doc", a, "--doc", b, "--cache-dir", store, QUESTION], env)
        r1 = report(err)
        print(err, end="")
        check(st == 0 and r1 is not None, "run 1 (a, b) answers and reports")
        check(r1 and r1[0] == 2 and r1[1] > 0 and r1[2] == r1[1] and r1[3] == 0,
              f"run 1 prefills every document token: {r1}")
        check("TTFT" in err and "tokens/s" in err, "run 1 reports TTFT and tokens/s")
        check(len([f for f in os.listdir(store) if f.endswith(".lzkv")]) == 2,
              "run 1 leaves two documents in --cache-dir")

        st, out2, err = run(prog, ["--doc", b, "--doc", a, "--cache-dir", store, QUESTION], env)
        r2 = report(err)
        print(err, end="")
        check(st == 0 and r2 and r2[1] == r1[1] and r2[2] == 0 and r2[6] == r1[1],
              f"run 2 (b, a) prefills 0 document tokens, all from the store: {r2}")

        st, out3, err = run(prog, ["--doc", b, "--doc", a, "--policy", "lazy", "--no-store",
                                   QUESTION], env)
        r3 = report(err)
        check(st == 0 and r3 and r3[2] == r1[1], f"run 3 (b, a, no store) prefills both: {r3}")
        check(len(out2) > 1 and out2 == out3,
              f"run 2's answer equals run 3's: {out2!r} vs {out3!r}")
        check(out3 != out1, f"the order changes the answer (the comparison can fail): {out1!r}")
        st, out_none, err = run(prog, ["--doc", b, "--doc", a, "--policy", "none", QUESTION],
                                env_xdg)
        check(st == 0 and "attended with the whole prompt" in err and out_none != out3,
              f"--policy none (whole prompt) answers otherwise: {out_none!r}")

        st, _, err = run(prog, ["--doc", a, QUESTION], env_xdg)
        xdg = os.path.join(tmp, "xdg", "lazyattn")
        check(st == 0 and os.path.isdir(xdg) and
              len([f for f in os.listdir(xdg) if f.endswith(".lzkv")]) == 1,
              "the default store is $XDG_CACHE_HOME/lazyattn")

        sample = ["--doc", a, "--no-store", "--temperature", "0.9", "--seed", "7", "--top-k", "50",
                  "--top-p", "0.9", QUESTION]
        s1, o1, _ = run(prog, sample, env)
        s2, o2, _ = run(prog, sample, env)
        check(s1 == 0 and o1 == o2 and o1 != out1, "seeded sampling repeats itself")
        st, o_stdin, _ = run(prog, ["--doc", a, "--doc", b, "--no-store", "-"], env,
                             stdin=QUESTION.encode())
        check(st == 0 and o_stdin == out1, "the question from stdin gives run 1's answer")

        batch = os.path.join(tmp, "batch.jsonl")
        with open(batch, "w") as f:
            f.write(json.dumps({"question": QUESTION, "docs": [a, b]}) + "\n\n")
            f.write(json.dumps({"docs": [b], "texts": [DOC_A], "question": QUESTION}) + "\n")
        st, out, err = run(prog, ["--batch", batch, "--no-store"], env)
        lines = [json.loads(l) for l in out.decode().splitlines()] if st == 0 else []
        check(len(lines) == 2 and lines[0]["line"] == 1 and lines[1]["line"] == 3,
              f"--batch: one JSON line per request: {st} {err!r}")
        if len(lines) == 2:
            check(lines[0]["prefilled"] == r1[1] and lines[1]["prefilled"] == 0 and
                  lines[1]["reused"] == r1[1], f"--batch: the second line reuses both: {lines}")
            check(lines[0]["answer"] == json_text(out1[:-1]) and
                  lines[1]["answer"] == json_text(out3[:-1]), "--batch: the answers of runs 1, 3")
        st, _, err = run(prog, ["--batch", "-", "--no-store"], env,
                         stdin=b'{"question": "x"}\n{"question": "y", "doc": ["a.txt"]}\n')
        check(st == 1 and ":2: column" in err and '"doc" unknown' in err,
              f"--batch: a bad line named: {err!r}")

        # bad inputs
        big = os.path.join(tmp, "big.txt")
        open(big, "w").write(" ".join(f"word{i} cache" for i in range(800)))
        cases = [
            (["--doc", os.path.join(tmp, "missing.txt"), QUESTION], 1, "missing.txt: No such file"),
            (["--model", os.path.join(tmp, "missing.gguf"), QUESTION], 1, "missing.gguf: No such"),
            (["--model", os.path.join(FIXTURES, "refuse_yarn.gguf"), QUESTION], 1,
             "llama.rope.scaling.type"),
            (["--model", os.path.join(FIXTURES, "no_scaling.gguf"), QUESTION], 1,
             "tokenizer.ggml.model"),
            (["--doc", big, "--kv-budget", "64KiB", QUESTION], 1, "more than --kv-budget"),
            (["--doc", tmp, QUESTION], 1, "is a directory"),
            ([], 2, "a question is needed"),
            ([QUESTION, "again"], 2, "one question only"),
            (["--policy", "eager", QUESTION], 2, "--policy"),
            (["--doc", "-", "-"], 2, "stdin"),
            (["--no-store", "--cache-dir", store, QUESTION], 2, "--no-store"),
            (["--temperature", "-1", QUESTION], 2, "--temperature"),
        ]
        for args, want, text in cases:
            if args[:1] == ["--model"]:  # another model: not run()'s
                r = subprocess.run([prog, "--no-progress"] + args, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=env_xdg, timeout=300)
                st, err = r.returncode, r.stderr.decode("utf-8", "replace")
            else:
                st, _, err = run(prog, args, env_xdg)
            check(st == want and text in err, f"{args[:3]} -> {st} ({want}), {err.strip()!r}")
        # a closed stdout, and a reader that went away
        st, _, err = run(prog, ["--doc", a, "--no-store", QUESTION], env,
                         preexec_fn=lambda: os.close(1))
        check(st == 1 and "stdout: Bad file descriptor" in err, f"closed stdout: {st} {err!r}")
        p = subprocess.Popen([prog, "--model", MODEL, "--doc", a, "--no-store", QUESTION],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        p.stdout.close()
        err = p.stderr.read().decode()
        st = p.wait(timeout=300)
        check(st == 1 and "Broken pipe" in err, f"a reader gone: {st} {err!r}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

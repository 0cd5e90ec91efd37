#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""lazyattn-rag's model identity covers every byte of the model file
(serve/rag_identity.c), on the fixture model (tests/fixtures/rag_llama3.gguf).

What is checked, one --cache-dir throughout:
  1. a copy of the fixture: every document token prefilled; the content hash
     memoized in <cache-dir>/models/ (one .id file);
  2. an identical copy at another path: the same identity (0 prefilled, all
     from the store), a memo of its own;
  3. the first copy again: the memo read, not rewritten (same inode);
  4. a copy that differs in ONE byte in the middle of its largest tensor
     (beyond the first and last 4 KiB, which the identity once sampled alone):
     another identity, every document token prefilled again;
  5. the first copy's mtime touched: a new memo (another key); the old memo
     moved onto the new one's name (a memo whose key differs) is ignored and
     replaced; the identity unchanged (0 prefilled).

usage: test_rag_identity.py PROGRAM
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
MODEL = os.path.join(FIXTURES, "rag_llama3.gguf")
DOC = "The cache keeps documents.\nTokens and kernels live in OpenCL.\n"
QUESTION = "What does the cache keep?"
REPORT = re.compile(r"documents: (\d+) \((\d+) tokens\): (\d+) prefilled, (\d+) reused")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def largest_tensor(path):
    """(absolute offset, byte count) of the GGUF file's largest tensor's data."""
    b = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, b, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return b[pos - n:pos].decode("utf-8", "replace")

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q",
              11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert b[:4] == b"GGUF"
    pos = 4
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        k, t = string(), take("I")
        v = value(t)
        if k == "general.alignment":
            align = v
    offsets = []
    for _ in range(n_tensors):
        string()
        n_dims = take("I")
        pos += 8 * n_dims
        take("I")
        offsets.append(take("Q"))
    data = (pos + align - 1) // align * align
    offsets.sort()
    ends = offsets[1:] + [len(b) - data]
    span, start = max((e - o, o) for o, e in zip(offsets, ends))
    return data + start, span


def run(prog, model, store, doc):
    r = subprocess.run([prog, "--model", model, "--max-tokens", "2", "--no-progress", "--doc", doc,
                        "--cache-dir", store, QUESTION], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300)
    err = r.stderr.decode("utf-8", "replace")
    m = REPORT.search(err)
    if r.returncode != 0 or not m:
        print(err, end="")
    return [int(x) for x in m.groups()] if r.returncode == 0 and m else None


def memos(store):
    d = os.path.join(store, "models")
    return {f: os.stat(os.path.join(d, f)).st_ino for f in os.listdir(d)} if os.path.isdir(d) else {}


def main():
    prog = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="lazyattn-rag-id-")
    try:
        store, doc = os.path.join(tmp, "store"), os.path.join(tmp, "doc.txt")
        open(doc, "w").write(DOC)
        first, same, edited = (os.path.join(tmp, n) for n in ("first.gguf", "same.gguf",
                                                              "edited.gguf"))
        shutil.copyfile(MODEL, first)
        shutil.copyfile(MODEL, same)
        offset, span = largest_tensor(MODEL)
        check(span > 3 * 4096, f"the largest tensor ({span} bytes) reaches past both 4 KiB ends")
        middle = offset + span // 2
        data = bytearray(open(MODEL, "rb").read())
        data[middle] ^= 0x01
        open(edited, "wb").write(data)

        r1 = run(prog, first, store, doc)
        check(r1 is not None and r1[1] > 0 and r1[2] == r1[1],
              f"1. the first copy prefills every document token: {r1}")
        m1 = memos(store)
        check(len(m1) == 1 and all(f.endswith(".id") for f in m1), f"1. one memo: {m1}")

        r2 = run(prog, same, store, doc)
        check(r1 is not None and r2 is not None and r2[2] == 0 and r2[3] == r1[1],
              f"2. an identical copy elsewhere reuses them all: {r2}")
        m2 = memos(store)
        check(len(m2) == 2 and set(m1) < set(m2), f"2. a memo for the second path: {m2}")

        r3 = run(prog, first, store, doc)
        check(r3 is not None and r3[2] == 0, f"3. the first copy again reuses them all: {r3}")
        check(memos(store) == m2, "3. the memo read, not rewritten")

        r4 = run(prog, edited, store, doc)
        check(r1 is not None and r4 is not None and r4[2] == r1[1] and r4[3] == 0,
              f"4. one byte changed mid-tensor ({middle}): everything prefilled again: {r4}")

        st = os.stat(first)
        os.utime(first, ns=(st.st_atime_ns, st.st_mtime_ns + 1000000000))
        old = memos(store)
        r5 = run(prog, first, store, doc)
        new = memos(store)
        added = sorted(set(new) - set(old))
        check(r5 is not None and r5[2] == 0 and len(added) == 1,
              f"5. a touched mtime: a new memo {added}, the same identity: {r5}")
        if len(added) == 1:
            d = os.path.join(store, "models")
            os.replace(os.path.join(d, list(m1)[0]), os.path.join(d, added[0]))
            moved = os.stat(os.path.join(d, added[0])).st_ino
            r6 = run(prog, first, store, doc)
            check(r6 is not None and r6[2] == 0 and
                  os.stat(os.path.join(d, added[0])).st_ino != moved,
                  f"5. a memo with another key ignored and replaced: {r6}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

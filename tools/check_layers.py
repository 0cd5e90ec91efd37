#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that lib/ and serve/ are built in layers without circles.

Two graphs between the files of lib/ and serve/:
  - includes: file A includes file B (#include "..." resolved against A's
    folder, then lib/ and serve/);
  - calls: object A uses a symbol that object B defines (`nm` of the
    objects that build/compile_commands.json names for each source), so
    a function, a table or a global variable all count.
Fails (exit 1) on a cycle between files in either graph (each cycle is
printed, file by file) and on an edge from a lower layer into a higher
one. The layers, lowest first:
    lib/*.h (shared helpers) < lib/device < lib/attn < lib/cache
      < lib/store < lib/testing < serve/
(serve/'s benchmarks draw workloads from the testing library.) Within one
layer files may depend on each other in any direction, as long
as no circle closes.

Usage: check_layers.py SOURCE_ROOT BUILD_DIR
Needs python3 and nm (binutils) only.
"""
import json
import os
import re
import subprocess
import sys

# (path prefix, layer name, rank); the first prefix that matches wins.
LAYERS = [
    ("lib/device/", "device", 1),
    ("lib/attn/", "attn", 2),
    ("lib/cache/", "cache", 3),
    ("lib/store/", "store", 4),
    ("lib/testing/", "testing", 5),
    ("serve/", "serve", 6),
    ("lib/", "lib", 0),
]
SCANNED = ("lib/", "serve/")
SOURCE_EXT = (".c", ".h", ".inc")


def layer_of(path):
    for prefix, name, rank in LAYERS:
        if path.startswith(prefix):
            return name, rank
    return None, None


def allowed(src, dst):
    """May file src depend on file dst?"""
    return layer_of(dst)[1] <= layer_of(src)[1]


def source_files(root):
    out = []
    for top in SCANNED:
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith(SOURCE_EXT):
                    out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def include_graph(root, files):
    known = set(files)
    graph = {f: set() for f in files}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for name in INCLUDE.findall(text):
            for base in (os.path.dirname(f), "lib", "serve"):
                cand = os.path.normpath(os.path.join(base, name))
                if cand in known:
                    graph[f].add(cand)
                    break
    return graph


def objects(root, build):
    """{source path relative to root: object path} for the scanned sources."""
    with open(os.path.join(build, "compile_commands.json")) as fh:
        commands = json.load(fh)
    out = {}
    for c in commands:
        src = os.path.relpath(os.path.normpath(os.path.join(c["directory"], c["file"])),
                              os.path.realpath(root))
        if not src.startswith(SCANNED) or src in out:
            continue
        obj = c.get("output")
        if obj is None:
            m = re.search(r"(?:^|\s)-o\s+(\S+)", c.get("command", ""))
            obj = m.group(1) if m else None
        if obj:
            out[src] = os.path.join(c["directory"], obj)
    return out


def call_graph(objs):
    defined, used = {}, {}
    for src, obj in objs.items():
        if not os.path.exists(obj):
            sys.exit(f"check_layers: {obj} (of {src}) is not built")
        text = subprocess.run(["nm", "-P", obj], check=True, capture_output=True,
                              text=True).stdout
        used[src] = set()
        for line in text.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            sym, kind = parts[0], parts[1]
            if kind == "U":
                used[src].add(sym)
            elif kind.isupper():
                defined.setdefault(sym, set()).add(src)
    graph = {src: set() for src in objs}
    why = {}
    for src, syms in used.items():
        for sym in sorted(syms):
            for dst in defined.get(sym, ()):
                if dst != src:
                    graph[src].add(dst)
                    why.setdefault((src, dst), sym)
    return graph, why


def cycles(graph):
    """The strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def one_cycle(graph, comp):
    """A shortest circle through the first file of the component."""
    inside = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        nxt = []
        for v in queue:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in inside and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        queue = nxt
    return comp


def report(kind, graph, why):
    bad = 0
    for comp in cycles(graph):
        bad += 1
        path = one_cycle(graph, comp)
        steps = []
        for a, b in zip(path, path[1:]):
            sym = why.get((a, b))
            steps.append(f"{a} -> {b}" + (f" ({sym})" if sym else ""))
        print(f"{kind} cycle among {len(comp)} files: {' '.join(comp)}")
        for s in steps:
            print(f"    {s}")
    for a in sorted(graph):
        for b in sorted(graph[a]):
            if not allowed(a, b):
                bad += 1
                sym = why.get((a, b))
                print(f"{kind} from a lower layer into a higher one: {a} ({layer_of(a)[0]}) -> "
                      f"{b} ({layer_of(b)[0]})" + (f" ({sym})" if sym else ""))
    return bad


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    root, build = sys.argv[1], sys.argv[2]
    files = source_files(root)
    inc = include_graph(root, files)
    calls, why = call_graph(objects(root, build))
    bad = report("include", inc, {}) + report("call", calls, why)
    n_inc = sum(len(v) for v in inc.values())
    n_call = sum(len(v) for v in calls.values())
    print(f"check_layers: {len(files)} files, {n_inc} includes, {len(calls)} objects, "
          f"{n_call} call edges: {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that a shared library exports exactly the functions its header declares.

Usage: check_exports.py LIBRARY.so HEADER.h

The header's own prototypes (comments, preprocessor lines, struct and enum
bodies and the C++ guard removed; every top-level declaration whose name is
followed by a parameter list, typedefs and static functions left out)
against `nm -D --defined-only` of the library. Fails (exit 1), listing
them, on a symbol exported but not declared (an internal that leaks, a
test helper in the product) and on a function declared but not exported
(a missing LAZYATTN_API, or a function never written). python3 and nm only.
"""
import re
import subprocess
import sys

# What the linker itself may define in a shared object.
LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def declared(header):
    text = open(header, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"\\\n", " ", text)
    # the C++ guard: extern "C" { ... } between #ifdef __cplusplus and #endif
    text = re.sub(r"#\s*ifdef\s+__cplusplus.*?#\s*endif", " ", text, flags=re.S)
    text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
    while True:  # struct, union and enum bodies, innermost first
        stripped = re.sub(r"\{[^{}]*\}", " ", text)
        if stripped == text:
            break
        text = stripped
    names = set()
    for decl in text.split(";"):
        decl = " ".join(decl.split())
        if not decl or decl.startswith(("typedef ", "static ")):
            continue
        m = re.match(r"[^(]*?\b([A-Za-z_]\w*)\s*\(", decl)
        if m:
            names.add(m.group(1))
    return names


def exported(library):
    out = subprocess.run(["nm", "-D", "--defined-only", library], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-1] not in LINKER_SYMBOLS:
            names.add(parts[-1].split("@")[0])
    return names


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    library, header = sys.argv[1], sys.argv[2]
    want, have = declared(header), exported(library)
    extra, missing = sorted(have - want), sorted(want - have)
    for name in extra:
        print(f"{library}: exports {name}, which {header} does not declare")
    for name in missing:
        print(f"{library}: does not export {name}, declared in {header}")
    print(f"check_exports: {library}: {len(have)} exported, {header}: {len(want)} declared: "
          f"{len(extra) + len(missing)} difference(s)")
    return 1 if extra or missing else 0


if __name__ == "__main__":
    sys.exit(main())

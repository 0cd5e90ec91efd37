#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Install test: `meson install --destdir` of this build into a temporary
directory (no root, nothing outside it is touched), then examples/quickstart.c
built by README.md's own `cc` line and examples/cache_path.c built against the installed header and library with
`pkg-config --cflags --libs lazyattn` (PKG_CONFIG_PATH into the stage,
PKG_CONFIG_SYSROOT_DIR = the stage, as for any DESTDIR install; pkgconf then
prefixes the stage to the Requires' paths too, /usr/include etc., which do
not exist there and leave the compiler's defaults in charge) and run: each
checks its answers against the float64 reference and exits non-zero
otherwise.

Also checked: the .pc file names the configured prefix (not the stage), the
pkg-config flags point into the stage only, the compiler read the installed
lazyattn.h (not the source tree's), and the programs loaded the installed
liblazyattn.so.

usage: install_test.py --meson MESON --build-root DIR --source-root DIR
       --prefix P --libdir L --includedir I [--sanitize S] -- CC [ARGS...]
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile


def fail(msg):
    print(f"install_test: FAIL: {msg}")
    sys.exit(1)


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.stdout:
        print(r.stdout.rstrip())
    if r.returncode != 0:
        fail(f"{cmd[0]} exited with {r.returncode}")
    return r.stdout


PKG = "$(pkg-config --cflags --libs lazyattn lazyattn-testing)"


def readme_command(source_root):
    """The `cc ...` line of README.md's "Install and pkg-config" block, as words."""
    text = open(os.path.join(source_root, "README.md"), encoding="utf-8").read()
    m = re.search(r"## Install and pkg-config\n.*?```sh\n(.*?)```", text, re.S)
    lines = [l.split("#")[0].strip() for l in (m.group(1).splitlines() if m else [])]
    cc = [l for l in lines if l.startswith("cc ")]
    if len(cc) != 1 or PKG not in cc[0]:
        fail(f"README.md's install block has no single 'cc ... {PKG}' line: {cc}")
    return shlex.split(cc[0].replace(PKG, "@PKG@"))


def under(path, root):
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root + os.sep)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meson", nargs="+", required=True)
    ap.add_argument("--build-root", required=True)
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--includedir", required=True)
    ap.add_argument("--sanitize", default="none")
    ap.add_argument("cc", nargs="+")
    a = ap.parse_args()

    libdir = os.path.join(a.prefix, a.libdir)  # join keeps an absolute libdir as is
    includedir = os.path.join(a.prefix, a.includedir)
    tmp = tempfile.mkdtemp(prefix="lazyattn-install-")
    try:
        stage = os.path.join(tmp, "stage")
        # --no-rebuild: the build is current (meson test built it); never
        # start ninja from inside a test run.
        run(a.meson + ["install", "-C", a.build_root, "--destdir", stage, "--no-rebuild", "--quiet"])
        staged = lambda p: os.path.join(stage, p.lstrip("/"))
        pc = staged(os.path.join(libdir, "pkgconfig", "lazyattn.pc"))
        for f in (pc, staged(os.path.join(includedir, "lazyattn.h")),
                  staged(os.path.join(includedir, "lazyattn_testing.h")),
                  staged(os.path.join(libdir, "pkgconfig", "lazyattn-testing.pc")),
                  staged(os.path.join(libdir, "liblazyattn.so")),
                  staged(os.path.join(libdir, "liblazyattn-testing.so"))):
            if not os.path.isfile(f):
                fail(f"{f} was not installed")
        # The .pc names the final prefix; DESTDIR is the packager's business.
        fields = dict(l.split("=", 1) for l in open(pc).read().splitlines() if "=" in l and ":" not in l.split("=", 1)[0])
        if fields.get("prefix") != a.prefix:
            fail(f"{pc}: prefix={fields.get('prefix')!r}, the build's prefix is {a.prefix!r}")

        env = dict(os.environ)
        env["PKG_CONFIG_PATH"] = os.path.dirname(pc)
        env["PKG_CONFIG_SYSROOT_DIR"] = stage
        # the examples check against the reference: the testing library too
        cflags = run(["pkg-config", "--cflags", "lazyattn", "lazyattn-testing"], env=env).split()
        libs = run(["pkg-config", "--libs", "lazyattn", "lazyattn-testing"], env=env).split()
        if "-I" + staged(includedir) not in cflags:
            fail(f"pkg-config --cflags {cflags} lacks -I{staged(includedir)}")
        if ("-L" + staged(libdir) not in libs or "-llazyattn" not in libs or
                "-llazyattn-testing" not in libs):
            fail(f"pkg-config --libs {libs} lacks -L{staged(libdir)} -llazyattn -llazyattn-testing")
        for flag in cflags + libs:
            if flag[:2] in ("-I", "-L") and a.prefix != "/usr" and flag[2:].startswith(a.prefix):
                fail(f"{flag}: a path outside the stage (the prefix itself)")

        san = [] if a.sanitize in ("", "none") else ["-fsanitize=" + a.sanitize]
        examples = os.path.join(a.source_root, "examples")
        common_dir = os.path.join(a.source_root, "common")  # the programs' option parser
        # the stage's library only: meson test puts the build tree's on the
        # path, which would hide a program linked to the wrong one
        run_env = dict(os.environ)
        keep = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":")
                if d and not under(d, a.build_root)]
        run_env["LD_LIBRARY_PATH"] = ":".join([staged(libdir)] + keep)
        # README.md's own line: cc -o quickstart examples/quickstart.c $(pkg-config ...) -lm,
        # run in the source tree with this build's compiler (and sanitizer) for `cc`, the
        # output into the temporary directory
        words = readme_command(a.source_root)
        if words[0] != "cc" or "-o" not in words:
            fail(f"README.md's cc line {words}: expected 'cc -o NAME FILE.c ...'")
        readme_exe = os.path.join(tmp, words[words.index("-o") + 1])
        readme_cmd = []
        for i, w in enumerate(words):
            if i == 0:
                readme_cmd += a.cc + san
            elif w == "@PKG@":
                readme_cmd += cflags + libs
            elif i > 0 and words[i - 1] == "-o":
                readme_cmd.append(readme_exe)
            else:
                readme_cmd.append(w)
        readme_srcs = [w for w in words if w.endswith(".c")]
        if readme_srcs != ["examples/quickstart.c"]:
            fail(f"README.md's cc line builds {readme_srcs}, this test checks examples/quickstart.c")
        for prog in ("cache_path", "quickstart"):
            src = os.path.join(examples, prog + ".c")
            exe = os.path.join(tmp, prog)
            common = a.cc + ["-std=c11", "-D_POSIX_C_SOURCE=200809L"] + san + cflags
            if prog == "quickstart":
                # only the installed headers: no -I into examples/
                deps = run(common + ["-M", src], env=env)
            else:
                # the option parser is the programs' own helper, not the library's API;
                # common/ holds no lazyattn header, so the installed one is the only one
                deps = run(common + ["-I" + common_dir, "-M", src], env=env)
            headers = [w for w in deps.replace("\\\n", " ").split() if w.endswith("lazyattn.h")]
            if not headers or not all(under(h, stage) for h in headers):
                fail(f"{prog}: lazyattn.h came from {headers}, not from the stage")
            if prog == "quickstart":
                run(readme_cmd, env=env, cwd=a.source_root)
                exe = readme_exe
            else:
                run(common + ["-I" + common_dir, src, os.path.join(common_dir, "cli_options.c"), "-o", exe]
                    + san + libs + ["-lm"], env=env)
            ldd = run(["ldd", exe], env=run_env)
            line = [l for l in ldd.splitlines() if "liblazyattn.so" in l]
            if not line or staged(libdir) not in line[0]:
                fail(f"{prog} does not load the installed liblazyattn.so: {line}")
            out = run([exe], env=run_env, cwd=tmp)  # exits non-zero off the reference
            last = [l for l in out.splitlines() if l.strip()][-1:]
            if not last or not last[0].rstrip().endswith("ok"):
                fail(f"{prog}: its last line is not the reference check's 'ok': {last}")
        print("install_test: installed into a temporary DESTDIR, built with pkg-config, both "
              "programs within the float64 reference's tolerance")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Intel's OpenCL CPU runtime from PyPI, registered with the system's ICD
# loader without touching /etc/OpenCL/vendors.
#
#   sh tools/intel-opencl-rt.sh                 installs (once), prints the
#                                               environment: eval "$(sh tools/intel-opencl-rt.sh)"
#   sh tools/intel-opencl-rt.sh CMD [ARGS...]   installs (once), runs CMD in that environment
#
# pip downloads the wheels (intel-opencl-rt 2026.2.0, tbb 2023.*,
# intel-cmplr-lib-rt 2026.*) and their data/lib folders are unpacked into one
# folder, $LAZYATTN_INTEL_RT/lib (default ~/.cache/lazyattn/intel-opencl-rt),
# leaving out the wheel's own libOpenCL.so* (the system's ICD loader is used)
# and its .icd files (they hold a placeholder path). libintelocl.so is
# registered by absolute path in an .icd file of a folder named by
# OCL_ICD_VENDORS (which then lists only this runtime, unless
# LAZYATTN_INTEL_RT_BESIDE names more below; select it with
# LAZYATTN_PLATFORM=Intel if more are added) and the lib folder, which holds
# TBB and the compiler runtime (libsvml, libimf, libintlc) too, goes on
# LD_LIBRARY_PATH.
set -eu
prefix=${LAZYATTN_INTEL_RT:-${HOME:-/tmp}/.cache/lazyattn/intel-opencl-rt}
lib=$prefix/lib
say() { echo "intel-opencl-rt: $*" >&2; }

if [ ! -f "$lib/libintelocl.so" ] || [ ! -f "$lib/libtbb.so.12" ] || [ ! -f "$lib/libsvml.so" ]; then
    say "installing intel-opencl-rt 2026.2.0 into $prefix"
    rm -rf "$prefix/wheels" "$lib"
    mkdir -p "$prefix/wheels" "$lib"
    python3 -m pip download -q --only-binary=:all: -d "$prefix/wheels" \
        'intel-opencl-rt==2026.2.0' 'tbb==2023.*' 'intel-cmplr-lib-rt==2026.*' >&2
    python3 - "$prefix/wheels" "$lib" <<'PY'
import glob, os, re, sys, zipfile
wheels, lib = sys.argv[1:]
for path in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            m = re.fullmatch(r"[^/]+\.data/data/lib/([^/]+)", info.filename)
            if not m or m.group(1).startswith("libOpenCL.so"):
                continue
            target = os.path.join(lib, m.group(1))
            with z.open(info) as src, open(target, "wb") as dst:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    dst.write(chunk)
PY
    rm -rf "$prefix/wheels"
    for f in libintelocl.so libtbb.so.12 libsvml.so; do
        [ -f "$lib/$f" ] || { say "$f missing from the wheels"; exit 1; }
    done
fi

# LAZYATTN_INTEL_RT_BESIDE=DIR: the .icd files of DIR (e.g. /etc/OpenCL/vendors:
# PoCL) registered too, in a folder of their own, so that two implementations,
# two devices, are visible together (tests/test_doc_devices.c).
vendors=$prefix/vendors
if [ -n "${LAZYATTN_INTEL_RT_BESIDE:-}" ]; then
    vendors=$prefix/vendors-beside
    rm -rf "$vendors"
    mkdir -p "$vendors"
    for f in "$LAZYATTN_INTEL_RT_BESIDE"/*.icd; do
        [ -f "$f" ] && cp "$f" "$vendors/"
    done
fi
mkdir -p "$vendors"
echo "$lib/libintelocl.so" > "$vendors/intel-cpu.icd"
OCL_ICD_VENDORS=$vendors
LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OCL_ICD_VENDORS LD_LIBRARY_PATH

if [ $# -eq 0 ]; then
    echo "export OCL_ICD_VENDORS='$OCL_ICD_VENDORS'"
    echo "export LD_LIBRARY_PATH='$LD_LIBRARY_PATH'"
else
    exec "$@"
fi

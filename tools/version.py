#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints the version from include/lazyattn.h, checked against VERSION (meson.build)."""
import re
import sys

text = open(sys.argv[1], encoding="utf-8").read()
parts = [re.search(r"#define LAZYATTN_VERSION_%s (\d+)" % p, text).group(1)
         for p in ("MAJOR", "MINOR", "PATCH")]
print(".".join(parts))

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Expected document digests for tests/test_doc_cache.c (test_doc_digest),
from Python's hashlib.blake2b: an implementation independent of libb2.

The digest (include/lazyattn.h, lazyattn_doc_digest) is BLAKE2b-256, unkeyed,
of model_id as u64 little-endian followed by each token as i32 little-endian;
lazyattn_doc_hash is the digest's first 8 bytes as a little-endian u64.

Run by hand (CI does not need Python for this) and paste the output into
the test's table:  python3 tools/doc_digest_fixture.py
"""
import hashlib
import struct


def digest(model_id, tokens):
    msg = struct.pack("<Q", model_id) + b"".join(struct.pack("<i", t) for t in tokens)
    return hashlib.blake2b(msg, digest_size=32).digest()


def wide(n):
    """tokens[i] = (int32)(uint32)(i * 2654435761), as the test builds them."""
    return [struct.unpack("<i", struct.pack("<I", (i * 2654435761) & 0xFFFFFFFF))[0] for i in range(n)]


CASES = [
    ("one token", 0, [0]),
    ("three tokens", 7, [1, 2, 3]),
    ("extremes", 0xFFFFFFFFFFFFFFFF, [-1, 2147483647, -2147483648]),
    ("2048 tokens", 0x123456789ABCDEF0, wide(2048)),
]

for name, model_id, tokens in CASES:
    d = digest(model_id, tokens)
    body = ", ".join("0x%02x" % b for b in d)
    print("    /* %s: model 0x%016x, %d tokens; hash 0x%016x */" %
          (name, model_id, len(tokens), struct.unpack("<Q", d[:8])[0]))
    print("    {%s}," % body)

"""A block's name in the prefix cache: chained, salted, the same in every process."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

from llmserve_ref.engine.kv_block import NONE_HASH, blocks_for, sha256_block_hash


def test_blocks_for_rounds_up():
    assert [blocks_for(n, 16) for n in (1, 16, 17, 32, 33)] == [1, 1, 2, 2, 3]
    assert blocks_for(5, 1) == 5


def test_the_hash_chains_parent_tokens_and_salt():
    first = sha256_block_hash(None, (1, 2, 3, 4), None)
    second = sha256_block_hash(first, (5, 6, 7, 8), None)
    assert second != sha256_block_hash(None, (5, 6, 7, 8), None)  # the parent counts
    assert first != sha256_block_hash(None, (1, 2, 3, 4), "a")  # so does the salt
    assert sha256_block_hash(None, (1, 2, 3, 4), "a") != sha256_block_hash(None, (1, 2, 3, 4), "b")
    assert sha256_block_hash(None, (12, 3), None) != sha256_block_hash(None, (1, 23), None)
    assert len(first) == 32 and first == sha256_block_hash(NONE_HASH, (1, 2, 3, 4), None)


def test_the_first_parent_is_seeded_from_pythonhashseed_so_processes_agree():
    seed = os.environ.get("PYTHONHASHSEED", "llmserve-none-hash")
    assert hashlib.sha256(seed.encode()).digest() == NONE_HASH
    probe = "from llmserve_ref.engine.kv_block import NONE_HASH; print(NONE_HASH.hex())"
    env = {**os.environ, "PYTHONHASHSEED": "7"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == hashlib.sha256(b"7").hexdigest()

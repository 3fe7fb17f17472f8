"""The prefix cache's disk tier (--prefix-cache-dir): blocks written when evicted from the pool
and at shutdown, read back by a later request in the same process or after a restart; the
byte budget; and files that are truncated, corrupt or another block's, removed with a warning
and never used. Run by CTest through pytest (tests/conftest.py) on models/kjv (blocks of 16
tokens, 15,360 bytes in bf16)."""
import glob
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_fixture import Server  # noqa: E402

MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "models", "kjv")
BLOCK = 16


def prompt(seed, length=200):
    rng = random.Random(seed)
    return [rng.randrange(3, 4000) for _ in range(length)]


def complete(server, tokens):
    """(text, cached prompt tokens) of a short greedy completion."""
    status, body = server.request("POST", "/v1/completions",
                                  {"prompt": tokens, "max_tokens": 8, "temperature": 0, "ignore_eos": True})
    assert status == 200, body
    return body["choices"][0]["text"], body["usage"]["prompt_tokens_details"]["cached_tokens"]


def block_files(directory):
    return sorted(glob.glob(os.path.join(directory, "*.block")))


def serve(binary, directory, *extra):
    return Server(binary, MODEL, "--prefix-cache-dir", directory, "--max-num-seqs", "2", *extra)


def test_a_restart_reads_the_prefix_back(binary, tmp_path):
    """A prompt's whole blocks, spilled at shutdown, are the next server's cached tokens: the
    same greedy text, 192 of 200 prompt tokens cached (12 blocks; never the last token's)."""
    directory = str(tmp_path / "cache")
    server = serve(binary, directory)
    fresh, cached = complete(server, prompt(1))
    assert cached == 0
    assert server.stop() == 0
    assert len(block_files(directory)) == 12
    server = serve(binary, directory)
    try:
        text, cached = complete(server, prompt(1))
        assert (text, cached) == (fresh, 192)
        assert server.metric("mlaserve_prefix_cache_disk_hits_total") == 192
        assert server.metric("mlaserve_prefix_cache_disk_read_bytes_total") > 192 * 960
        text, cached = complete(server, prompt(1)[:100] + prompt(2, 100))  # a shared first 6 blocks
        assert cached == 96
    finally:
        server.stop()


def test_evicted_blocks_are_written_and_read_back(binary, tmp_path):
    """With a pool of 32 blocks, four prompts of 13 blocks evict the first one's; its blocks
    are on disk at once and its next request reads them back in the same process."""
    directory = str(tmp_path / "cache")
    server = serve(binary, directory, "--kv-cache-gb", str(32 * 16 * 960 / 2**30))
    try:
        first, _ = complete(server, prompt(1))
        for seed in (2, 3, 4):
            complete(server, prompt(seed))
        assert len(block_files(directory)) >= 12  # written on eviction, before any shutdown
        assert server.metric("mlaserve_prefix_cache_disk_written_bytes_total") > 0
        text, cached = complete(server, prompt(1))
        assert (text, cached) == (first, 192)
        assert server.metric("mlaserve_prefix_cache_disk_hits_total") >= 192 - 32 * BLOCK
    finally:
        assert server.stop() == 0


def test_the_budget_keeps_the_newest_files(binary, tmp_path):
    """A budget of 10 files' bytes keeps at most 10 of the 24 blocks two prompts leave."""
    directory = str(tmp_path / "cache")
    file_bytes = 48 + 16 * 4 + 16 * 960  # header, tokens, payload
    server = serve(binary, directory, "--prefix-cache-disk-gb", str(10.5 * file_bytes / 2**30))
    complete(server, prompt(1))
    complete(server, prompt(2))
    assert server.stop() == 0
    files = block_files(directory)
    assert 1 <= len(files) <= 10
    assert all(os.path.getsize(f) == file_bytes for f in files)


def block_file(directory, tokens, n):
    """The file of the n-th full block of `tokens` (0-based): named by the prefix hash that chains
    the tokens of blocks 0..n (BlockManager::chain_hash), after this model's key."""
    mask, hash = 2**64 - 1, 0
    for b in range(n + 1):
        hash ^= 0x9E3779B97F4A7C15
        for token in tokens[b * BLOCK:(b + 1) * BLOCK]:
            hash ^= (token + 0x9E3779B97F4A7C15 + (hash << 6) + (hash >> 2)) & mask
            hash = (hash * 0xFF51AFD7ED558CCD) & mask
    key = os.path.basename(block_files(directory)[0]).split("-")[0]
    return os.path.join(directory, f"{key}-{hash:016x}.block")


def test_bad_files_are_removed_and_never_used(binary, tmp_path):
    """After a run, prompt 1's block 9 truncated, prompt 2's block 5 with a flipped payload byte,
    prompt 3's block 2 holding prompt 1's block 0: the next server warns about each as a request
    reaches it, removes it, and computes the block again (the same text; the cached tokens stop
    before the bad block)."""
    directory = str(tmp_path / "cache")
    server = serve(binary, directory)
    fresh = [complete(server, prompt(seed))[0] for seed in (1, 2, 3)]
    assert server.stop() == 0
    truncated, corrupt, foreign = (block_file(directory, prompt(1), 9), block_file(directory, prompt(2), 5),
                                   block_file(directory, prompt(3), 2))
    assert all(os.path.exists(path) for path in (truncated, corrupt, foreign))
    with open(truncated, "r+b") as f:
        f.truncate(os.path.getsize(truncated) - 100)
    with open(corrupt, "r+b") as f:
        f.seek(-5, os.SEEK_END)
        byte = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x40]))
    with open(block_file(directory, prompt(1), 0), "rb") as source, open(foreign, "wb") as target:
        target.write(source.read())
    server = serve(binary, directory)
    try:
        for seed, path, blocks, why in ((1, truncated, 9, "is truncated"), (2, corrupt, 5, "fails its checksum"),
                                        (3, foreign, 2, "belongs to another model or block")):
            assert complete(server, prompt(seed)) == (fresh[seed - 1], blocks * BLOCK)
            assert any(os.path.basename(path) in line and why in line for line in server.log_lines), why
            assert not os.path.exists(path)
    finally:
        server.stop()

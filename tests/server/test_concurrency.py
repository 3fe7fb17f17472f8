"""32 concurrent streaming requests of mixed lengths all complete, each greedy output equal
to the same request run alone. Run by CTest through pytest (tests/conftest.py)."""
import json
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_fixture import Server, make_tiny_model  # noqa: E402


def request_body(i):
    rng = random.Random(i)
    prompt = [rng.randrange(3, 32000) for _ in range(rng.choice([3, 17, 60, 150, 400]))]
    return {"prompt": prompt, "max_tokens": rng.choice([4, 9, 20, 33]), "temperature": 0, "ignore_eos": True,
            "stream": True}


def completion_text(server, body):
    status, events = server.stream("/v1/completions", body)
    if status != 200 or events[-1] != "[DONE]":
        raise RuntimeError(f"bad stream: {status} {events[-3:]}")
    chunks = [json.loads(e) for e in events[:-1]]
    return "".join(c["choices"][0]["text"] for c in chunks if c["choices"]), chunks[-1]["choices"][0]["finish_reason"]


def test_concurrent_streams_equal_each_request_alone(binary, work_dir):
    model = make_tiny_model(binary, os.path.join(work_dir, "tiny"))
    # Greedy outputs equal alone only where a token's arithmetic does not depend on how many
    # tokens share its step: on an AMX host BF16 layers of 16+ tokens take the AMX kernel, which
    # sums in another order (docs/kernels.md), so the server runs without it here; and every
    # prefill chunk takes the expanded MLA form (by default a short chunk after a long cached
    # prefix, which depends on the batch's token budget and on prefix-cache hits, is absorbed).
    server = Server(binary, model, "--kv-cache-gb", "0.25", "--chunked-prefill-size", "256", "--mla-prefill",
                    "expanded", env={"MLASERVE_AMX": "0"})
    try:
        bodies = [request_body(i) for i in range(32)]
        alone = [completion_text(server, body) for body in bodies]
        results = [None] * 32

        def run(i):
            try:
                results[i] = completion_text(server, bodies[i])
            except Exception as error:  # compared below
                results[i] = ("ERROR", str(error))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        generated = server.metric("mlaserve_generation_tokens_total")
    finally:
        code = server.stop()
    assert results == alone
    assert generated >= 2 * sum(b["max_tokens"] for b in bodies), "the generation token counter is short"
    assert code == 0, "exit code after SIGTERM"

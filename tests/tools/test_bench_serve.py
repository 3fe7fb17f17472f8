"""bench-serve against mlaserve's own server on the tiny model: token counts equal the
server's, a sweep writes a chart, a failing server is reported as failing, long prefill.
Usage: test_bench_serve.py MLASERVE WORK_DIR"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from server_fixture import Server, make_tiny_model  # noqa: E402

failures, checks = [], 0


def check(label, condition, detail=""):
    global checks
    checks += 1
    print(f"{'ok  ' if condition else 'FAIL'} {label} {detail if not condition else ''}")
    if not condition:
        failures.append(label)


def bench(binary, url, model, *args):
    return subprocess.run([binary, "bench-serve", "--base-url", url, "--tokenizer", model, "--no-progress", *args],
                          capture_output=True, text=True, timeout=600)


def check_shared_prefix(binary, url, model, server, work):
    """SGLang's generated-shared-prefix dataset: groups x prompts-per-group requests, each a
    group's system prompt and a question; one at a time, every question after its group's first
    finds the system prompt's whole blocks (16 tokens) in the server's prefix cache."""
    hits_before = server.metric("mlaserve_prefix_cache_hits_total")
    prompt_before = server.metric("mlaserve_prompt_tokens_total")
    out = os.path.join(work, "gsp.json")
    proc = bench(binary, url, model, "--dataset", "generated-shared-prefix", "--gsp-num-groups", "2",
                 "--gsp-prompts-per-group", "3", "--gsp-system-prompt-len", "96", "--gsp-question-len", "8",
                 "--gsp-output-len", "3", "--max-concurrency", "1", "--json", out)
    check("shared prefix: bench-serve exits 0", proc.returncode == 0, proc.stderr[-500:])
    result = json.load(open(out))
    check("shared prefix: groups x prompts-per-group requests", result["completed"] == 6 and result["failed"] == 0,
          str(result.get("errors")))
    check("shared prefix: input tokens equal the server's count",
          result["total_input_tokens"] == server.metric("mlaserve_prompt_tokens_total") - prompt_before)
    inputs = [r["prompt_tokens"] for r in result["requests"]]
    check("shared prefix: each prompt is a system prompt and a question", all(96 + 8 <= n <= 96 + 8 + 4 for n in inputs),
          str(inputs))
    hits = server.metric("mlaserve_prefix_cache_hits_total") - hits_before
    check("shared prefix: later questions hit their system prompt's blocks", hits >= 2 * 2 * 80, f"{hits} tokens")
    check("shared prefix: the config names the dataset",
          result["config"]["dataset"] == "generated-shared-prefix" and result["config"]["gsp"]["num_groups"] == 2,
          str(result["config"]))


def check_accept_length(binary, work):
    """Against a server with n-gram speculative decoding on the trained model (whose text
    repeats, so drafts are accepted): bench-serve reports SGLang's "Accept length", the tokens a
    verifying step emitted, from the server's counters over the run."""
    kjv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "kjv")
    server = Server(binary, kjv, "--kv-cache-gb", "0.05", "--speculative", "ngram", "--draft-policy", "fixed")
    try:
        out = os.path.join(work, "speculative.json")
        proc = bench(binary, f"http://127.0.0.1:{server.port}", kjv, "--input-len", "16", "--output-len", "48",
                     "--num-prompts", "4", "--max-concurrency", "2", "--ignore-eos", "--json", out)
        drafts = server.metric("mlaserve_spec_decode_num_drafts_total")
        accepted = server.metric("mlaserve_spec_decode_num_accepted_tokens_total")
        result = json.load(open(out))
        want = (drafts + accepted) / drafts if drafts else 0
        check(f"speculative server: Accept length {result.get('accept_length', 0):.2f} is the server's (drafts + accepted) "
              f"/ drafts over the run, above 1", proc.returncode == 0 and drafts > 0 and result["accept_length"] > 1 and
              abs(result["accept_length"] - want) < 1e-9 and "Accept length:" in proc.stdout,
              f"{drafts} {accepted} {proc.stderr[-300:]}")
    finally:
        server.stop()


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = make_tiny_model(binary, os.path.join(work, "tiny"))
    server = Server(binary, model, "--kv-cache-gb", "0.25")
    url = f"http://127.0.0.1:{server.port}"
    try:
        prompt_before = server.metric("mlaserve_prompt_tokens_total")
        generated_before = server.metric("mlaserve_generation_tokens_total")
        out = os.path.join(work, "run.json")
        proc = bench(binary, url, model, "--input-len", "48", "--output-len", "12", "--range-ratio", "0.5",
                     "--num-prompts", "10", "--max-concurrency", "4", "--json", out)
        check("bench-serve exits 0", proc.returncode == 0, proc.stderr[-500:])
        result = json.load(open(out))
        check("all requests completed", result["completed"] == 10 and result["failed"] == 0, str(result.get("errors")))
        check("output tokens equal the server's count",
              result["total_output_tokens"] == server.metric("mlaserve_generation_tokens_total") - generated_before)
        check("input tokens equal the server's count",
              result["total_input_tokens"] == server.metric("mlaserve_prompt_tokens_total") - prompt_before)
        check("per-request records carry the server's usage",
              all(r["usage_from_server"] and r["completion_tokens"] >= 1 for r in result["requests"]))
        check("the familiar block is printed", "Serving Benchmark Result" in proc.stdout and "Median TTFT (ms)" in proc.stdout)
        svg = os.path.join(work, "sweep.svg")
        proc = bench(binary, url, model, "--input-len", "32", "--output-len", "8", "--num-prompts", "8",
                     "--sweep", "1,2,4", "--svg", svg, "--ignore-eos", "--json", os.path.join(work, "sweep.json"))
        check("sweep exits 0", proc.returncode == 0, proc.stderr[-500:])
        tree = ElementTree.parse(svg)
        text = " ".join(t.text or "" for t in tree.iter("{http://www.w3.org/2000/svg}text"))
        check("sweep chart labels every concurrency", all(f"c={c}" in text for c in (1, 2, 4)), text[:200])
        check("sweep JSON has three runs", len(json.load(open(os.path.join(work, "sweep.json")))["runs"]) == 3)
        proc = bench(binary, url, model, "--input-len", "32", "--output-len", "5000", "--num-prompts", "3",
                     "--json", os.path.join(work, "errors.json"))
        errors = json.load(open(os.path.join(work, "errors.json")))
        check("a failing server is reported: non-zero exit", proc.returncode != 0)
        check("a failing server is reported: failures counted with the HTTP status",
              errors["failed"] == 3 and any("HTTP 400" in message for message in errors["errors"]), str(errors["errors"]))
        check_shared_prefix(binary, url, model, server, work)
        long = os.path.join(work, "long.json")
        for run in ("a first", "a second identical"):
            proc = bench(binary, url, model, "--long-prefill", "1500", "--json", long)
            result = json.load(open(long))
            check(f"long prefill measures cold TTFT ({run} run: nothing served from the prefix cache)",
                  proc.returncode == 0 and result["long_prefill_tokens"] == 1500 and result["ttft_ms"]["mean"] > 0 and
                  result["cached_tokens"] == 0 and "Cold time to first token" in proc.stdout and "not cold" not in proc.stderr,
                  f"{result.get('cached_tokens')} {proc.stderr[-300:]}")
        check("no speculative decoding: no Accept length", "Accept length" not in proc.stdout)
    finally:
        server.stop()
    check_accept_length(binary, work)
    proc = bench(binary, url, model, "--input-len", "8", "--output-len", "2", "--num-prompts", "2")
    check("an unreachable server is an error", proc.returncode != 0 and "cannot reach" in proc.stderr, proc.stderr[-300:])
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

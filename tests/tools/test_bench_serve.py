"""bench-serve against mlaserve's own server on the tiny model: token counts equal the
server's, a sweep writes a chart, a failing server is reported as failing, a response_format
reaches the server, long prefill, the shared-prefix dataset, and the accept length of a
speculative server. Run by CTest through
pytest (tests/conftest.py)."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from server_fixture import Server, make_tiny_model  # noqa: E402


def bench(binary, url, model, *args):
    return subprocess.run([binary, "bench-serve", "--base-url", url, "--tokenizer", model, "--no-progress", *args],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def tiny(binary, work_dir):
    return make_tiny_model(binary, os.path.join(work_dir, "tiny"))


@pytest.fixture(scope="module")
def server(binary, tiny):
    running = Server(binary, tiny, "--kv-cache-gb", "0.25")
    yield running
    running.stop()


def url_of(server):
    return f"http://127.0.0.1:{server.port}"


def test_token_counts_equal_the_servers(binary, tiny, server, work_dir):
    prompt_before = server.metric("mlaserve_prompt_tokens_total")
    generated_before = server.metric("mlaserve_generation_tokens_total")
    out = os.path.join(work_dir, "run.json")
    proc = bench(binary, url_of(server), tiny, "--input-len", "48", "--output-len", "12", "--range-ratio", "0.5",
                 "--num-prompts", "10", "--max-concurrency", "4", "--json", out)
    assert proc.returncode == 0, proc.stderr[-500:]
    result = json.load(open(out))
    assert result["completed"] == 10 and result["failed"] == 0, result.get("errors")
    assert result["total_output_tokens"] == server.metric("mlaserve_generation_tokens_total") - generated_before
    assert result["total_input_tokens"] == server.metric("mlaserve_prompt_tokens_total") - prompt_before
    assert all(r["usage_from_server"] and r["completion_tokens"] >= 1 for r in result["requests"])
    assert "Serving Benchmark Result" in proc.stdout and "Median TTFT (ms)" in proc.stdout


def test_a_sweep_charts_every_concurrency(binary, tiny, server, work_dir):
    svg, out = os.path.join(work_dir, "sweep.svg"), os.path.join(work_dir, "sweep.json")
    proc = bench(binary, url_of(server), tiny, "--input-len", "32", "--output-len", "8", "--num-prompts", "8",
                 "--sweep", "1,2,4", "--svg", svg, "--ignore-eos", "--json", out)
    assert proc.returncode == 0, proc.stderr[-500:]
    text = " ".join(t.text or "" for t in ElementTree.parse(svg).iter("{http://www.w3.org/2000/svg}text"))
    assert all(f"c={c}" in text for c in (1, 2, 4)), text[:200]
    assert len(json.load(open(out))["runs"]) == 3


def test_a_failing_server_is_reported(binary, tiny, server, work_dir):
    out = os.path.join(work_dir, "errors.json")
    proc = bench(binary, url_of(server), tiny, "--input-len", "32", "--output-len", "5000", "--num-prompts", "3",
                 "--json", out)
    errors = json.load(open(out))
    assert proc.returncode != 0
    assert errors["failed"] == 3 and any("HTTP 400" in message for message in errors["errors"]), errors["errors"]


def test_a_response_format_is_sent_with_each_chat_request(binary, tiny, server, work_dir):
    """--response-format: every request carries it, so the server constrains them (a schema it
    refuses fails every request with the server's 400 naming the keyword)."""
    def run(name, response_format):
        path, out = os.path.join(work_dir, name + ".json"), os.path.join(work_dir, name + "-run.json")
        json.dump(response_format, open(path, "w"))
        proc = bench(binary, url_of(server), tiny, "--endpoint", "chat", "--input-len", "16", "--output-len", "8",
                     "--num-prompts", "3", "--response-format", path, "--json", out)
        return proc, json.load(open(out))

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    proc, result = run("format", {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
    assert proc.returncode == 0 and result["completed"] == 3, result.get("errors")
    assert result["config"]["response_format"]["json_schema"]["schema"] == schema
    refused = dict(schema, properties={"n": {"type": "integer", "multipleOf": 3}})
    proc, result = run("refused", {"type": "json_schema", "json_schema": {"name": "n", "schema": refused}})
    assert proc.returncode != 0 and result["failed"] == 3
    assert all("multipleOf" in message for message in result["errors"]), result["errors"]


def test_shared_prefix_dataset(binary, tiny, server, work_dir):
    """SGLang's generated-shared-prefix dataset: groups x prompts-per-group requests, each a
    group's system prompt and a question; one at a time, every question after its group's first
    finds the system prompt's whole blocks (16 tokens) in the server's prefix cache."""
    hits_before = server.metric("mlaserve_prefix_cache_hits_total")
    prompt_before = server.metric("mlaserve_prompt_tokens_total")
    out = os.path.join(work_dir, "gsp.json")
    proc = bench(binary, url_of(server), tiny, "--dataset", "generated-shared-prefix", "--gsp-num-groups", "2",
                 "--gsp-prompts-per-group", "3", "--gsp-system-prompt-len", "96", "--gsp-question-len", "8",
                 "--gsp-output-len", "3", "--max-concurrency", "1", "--json", out)
    assert proc.returncode == 0, proc.stderr[-500:]
    result = json.load(open(out))
    assert result["completed"] == 6 and result["failed"] == 0, result.get("errors")
    assert result["total_input_tokens"] == server.metric("mlaserve_prompt_tokens_total") - prompt_before
    inputs = [r["prompt_tokens"] for r in result["requests"]]
    assert all(96 + 8 <= n <= 96 + 8 + 4 for n in inputs), inputs
    assert server.metric("mlaserve_prefix_cache_hits_total") - hits_before >= 2 * 2 * 80
    assert result["config"]["dataset"] == "generated-shared-prefix" and result["config"]["gsp"]["num_groups"] == 2


@pytest.mark.parametrize("run", ["first", "second identical"])
def test_long_prefill_measures_a_cold_ttft(binary, tiny, server, work_dir, run):
    """Nothing served from the prefix cache, on the first run or an identical second one; a
    server without speculative decoding prints no accept length."""
    long = os.path.join(work_dir, "long.json")
    proc = bench(binary, url_of(server), tiny, "--long-prefill", "1500", "--json", long)
    result = json.load(open(long))
    assert proc.returncode == 0, proc.stderr[-300:]
    assert result["long_prefill_tokens"] == 1500 and result["ttft_ms"]["mean"] > 0
    assert result["cached_tokens"] == 0 and "Cold time to first token" in proc.stdout and "not cold" not in proc.stderr
    assert "Accept length" not in proc.stdout


def test_accept_length_of_a_speculative_server(binary, work_dir):
    """Against a server with n-gram speculative decoding on the trained model (whose text
    repeats, so drafts are accepted): bench-serve reports SGLang's "Accept length", the tokens a
    verifying step emitted, from the server's counters over the run; a response's usage gives its
    own drafts as OpenAI's accepted and rejected prediction tokens."""
    kjv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "kjv")
    server = Server(binary, kjv, "--kv-cache-gb", "0.05", "--speculative", "ngram", "--draft-policy", "fixed")
    try:
        out = os.path.join(work_dir, "speculative.json")
        proc = bench(binary, url_of(server), kjv, "--input-len", "16", "--output-len", "48", "--num-prompts", "4",
                     "--max-concurrency", "2", "--ignore-eos", "--json", out)
        drafts = server.metric("mlaserve_spec_decode_num_drafts_total")
        accepted = server.metric("mlaserve_spec_decode_num_accepted_tokens_total")
        drafted = server.metric("mlaserve_spec_decode_num_draft_tokens_total")
        status, body = server.request("POST", "/v1/completions", {"prompt": "And God said", "max_tokens": 48,
                                                                  "ignore_eos": True})
        accepted_now = server.metric("mlaserve_spec_decode_num_accepted_tokens_total") - accepted
        drafted_now = server.metric("mlaserve_spec_decode_num_draft_tokens_total") - drafted
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-300:]
    result = json.load(open(out))
    assert drafts > 0 and result["accept_length"] > 1 and "Accept length:" in proc.stdout
    assert result["accept_length"] == pytest.approx((drafts + accepted) / drafts, abs=1e-9)
    assert status == 200 and drafted_now > 0, body
    assert body["usage"]["completion_tokens_details"] == {"accepted_prediction_tokens": accepted_now,
                                                          "rejected_prediction_tokens": drafted_now - accepted_now}


def test_an_unreachable_server_is_an_error(binary, tiny):
    proc = bench(binary, "http://127.0.0.1:9", tiny, "--input-len", "8", "--output-len", "2", "--num-prompts", "2")
    assert proc.returncode != 0 and "cannot reach" in proc.stderr, proc.stderr[-300:]

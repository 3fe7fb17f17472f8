"""Kimi Linear and Kimi K3 (MXFP4 experts) through the same server and API as DeepSeek-V3:
concurrent greedy completions equal the same requests one at a time (KDA state slots under
continuous batching and preemption); a prompt split across two requests (the second reusing
the first's cached blocks and KDA state snapshot) gives the logprobs of one request on a fresh
server; streaming chat works; an image is refused by name. With the tokenizer laid out as Kimi ships it
(tiktoken.model, added_tokens_decoder) and a generation_config.json, a chat turn ends on
<|im_end|> although the tokenizer's eos_token is [EOS], and requests sample with the checkpoint's
defaults.
Run by CTest through pytest (tests/conftest.py)."""
import base64
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_fixture import Server  # noqa: E402

PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "Once upon a time", "def fibonacci(n):",
           "Delta rules and gates", "Zebra", "A long prompt " * 8, "x"]


def complete(server, prompt):
    status, body = server.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0,
                                                              "ignore_eos": True})
    return body["choices"][0]["text"] if status == 200 else f"HTTP {status}: {body}"


# preset: (dtype, latent-cache GiB for 3 running + 3 snapshot state slots and about 140 tokens)
PRESETS = {"kimi-linear-tiny": ("bf16", 0.000277), "kimi-k3-tiny": ("mxfp4", 0.000394)}


def made(binary, work_dir, preset):
    model = os.path.join(work_dir, preset)
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([binary, "make-model", "--preset", preset, "--dtype", PRESETS[preset][0], "--seed", "11", model],
                       check=True, capture_output=True)
    return model


@pytest.mark.parametrize("preset", PRESETS)
def test_a_prompt_split_over_two_requests_matches_one(binary, work_dir, preset):
    """The second request reuses the first's cached blocks and KDA state snapshot."""
    model, cache_gb = made(binary, work_dir, preset), 0.01
    first = "Prefix caching with recurrent state " * 4
    whole = first + "and then some more words"
    body = {"prompt": whole, "max_tokens": 6, "temperature": 0, "logprobs": 3, "ignore_eos": True}
    server = Server(binary, model, "--kv-cache-gb", str(cache_gb), "--block-size", "4", "--chunked-prefill-size", "16",
                    "--chunked-prefill-size-alone", "16")
    try:
        server.request("POST", "/v1/completions", {"prompt": first, "max_tokens": 1})
        status, split = server.request("POST", "/v1/completions", body)
        hits = server.metric("mlaserve_prefix_cache_hits_total")
    finally:
        server.stop()
    server = Server(binary, model, "--kv-cache-gb", str(cache_gb), "--block-size", "4", "--chunked-prefill-size", "16",
                    "--chunked-prefill-size-alone", "16")
    try:
        status_alone, alone = server.request("POST", "/v1/completions", body)
    finally:
        server.stop()
    assert status == 200 and status_alone == 200, f"{split} {alone}"
    got, want = split["choices"][0]["logprobs"], alone["choices"][0]["logprobs"]
    assert hits > 0, "no cached tokens reused"
    assert got["tokens"] == want["tokens"]
    assert max(abs(a - b) for a, b in zip(got["token_logprobs"], want["token_logprobs"])) <= 1e-4


@pytest.mark.parametrize("preset", PRESETS)
def test_concurrent_requests_equal_one_at_a_time(binary, work_dir, preset):
    """Also streaming chat, an image refused by name, and SIGTERM's exit code."""
    model, cache_gb = made(binary, work_dir, preset), PRESETS[preset][1]
    # 3 running sequences and a small latent cache: 8 concurrent requests queue, and running
    # ones are preempted. At most 8 prefill (alone too) + 3 decode tokens a step: below 16, where 4-bit
    # layers (Kimi K3's MXFP4 experts) switch from the int8 dot to the packed GEMM, so a token
    # gets the same bits in any batch (kernels.md) and greedy outputs cannot differ by timing.
    # An fp32 cache: a preempted sequence is recomputed by the fp32 expanded attention, and over
    # a bf16 cache on AVX512_BF16 hosts its decoded tokens were attended with bf16 products
    # (mla_decode.h), which differ at bf16 precision. 1.1 x the bytes keeps ~140 tokens of it
    # (the state slots take a fixed share).
    server = Server(binary, model, "--kv-cache-gb", str(1.1 * cache_gb), "--kv-cache-dtype", "fp32", "--max-num-seqs", "3",
                    "--chunked-prefill-size", "8", "--chunked-prefill-size-alone", "8", "--block-size", "4")
    try:
        alone = [complete(server, p) for p in PROMPTS]
        assert all(not a.startswith("HTTP") for a in alone), alone
        together = {}
        threads = [threading.Thread(target=lambda p=p: together.__setitem__(p, complete(server, p))) for p in PROMPTS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [together[p] for p in PROMPTS] == alone
        assert server.metric("mlaserve_num_preemptions_total") > 0, "no preemption happened"
        # K3's format without its thinking turn: the prompt fits the small cache.
        status, events = server.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                                "max_tokens": 8, "stream": True,
                                                                "chat_template_kwargs": {"thinking": False}})
        deltas = [json.loads(e)["choices"][0]["delta"] for e in events if e != "[DONE]" and json.loads(e)["choices"]]
        text = "".join(d.get("content", "") + d.get("reasoning_content", "") for d in deltas)
        assert status == 200 and events[-1] == "[DONE]" and len(text) > 0, f"{status} {events[-3:]}"
        status, body = server.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})
        assert status == 400 and "vision tower" in body["error"]["message"], f"{status} {body}"
    finally:
        code = server.stop()
    assert code == 0, "SIGTERM exits 0"


# Kimi's special tokens at their offsets after the ranks (tokenization_kimi.py), here after 31744
# ranks so that the 256 special ids end at kimi-k3-tiny's vocabulary of 32000.
KIMI_BASE = 31744
KIMI_SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
                 10: "<|im_system|>", 17: "<|im_middle|>", 254: "[UNK]", 255: "[PAD]"}
IM_END, EOS = KIMI_BASE + 2, KIMI_BASE + 1


def with_kimi_tokenizer(model, out):
    """A copy of the model whose tokenizer is laid out as Kimi ships it: the 256 bytes and filler
    tokens (0xff + 3 bytes, in no UTF-8 text) as tiktoken ranks, specials in tokenizer_config.json's
    added_tokens_decoder; config.json's eos_token_id is [EOS] and generation_config.json's
    <|im_end|> (as Kimi K2's are), with temperature 0."""
    shutil.copytree(model, out, dirs_exist_ok=True)
    if os.path.exists(os.path.join(out, "tokenizer.json")):
        os.remove(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tiktoken.model"), "w") as ranks:
        for rank in range(KIMI_BASE):
            token = bytes([rank]) if rank < 256 else b"\xff" + (rank - 256).to_bytes(3, "big")
            ranks.write(f"{base64.b64encode(token).decode()} {rank}\n")
    decoder = {str(KIMI_BASE + offset): {"content": content, "special": True, "lstrip": False, "rstrip": False,
                                         "normalized": False, "single_word": False}
               for offset, content in KIMI_SPECIALS.items()}
    json.dump({"added_tokens_decoder": decoder, "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]",
               "tokenizer_class": "TikTokenTokenizer"}, open(os.path.join(out, "tokenizer_config.json"), "w"))
    config = json.load(open(os.path.join(out, "config.json")))
    config["eos_token_id"] = config["text_config"]["eos_token_id"] = EOS
    json.dump(config, open(os.path.join(out, "config.json"), "w"))
    json.dump({"eos_token_id": IM_END, "temperature": 0.0}, open(os.path.join(out, "generation_config.json"), "w"))
    return out


def test_kimi_tokenizer_layout(binary, work_dir):
    """A chat turn ends on <|im_end|> (generation_config.json's eos_token_id) although the
    tokenizer's eos_token is [EOS]; requests without a temperature sample with the checkpoint's;
    logit_bias errors name the problem."""
    model = with_kimi_tokenizer(made(binary, work_dir, "kimi-k3-tiny"), os.path.join(work_dir, "kimi-k3-kimi-tokenizer"))
    server = Server(binary, model, "--kv-cache-gb", "0.01")
    try:
        chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "logit_bias": {str(IM_END): 100}}
        status, body = server.request("POST", "/v1/chat/completions", chat)
        assert status == 200 and body["choices"][0]["finish_reason"] == "stop", body
        assert body["usage"]["completion_tokens"] == 1 and body["choices"][0]["message"]["content"] == "", body
        status, body = server.request("POST", "/v1/chat/completions", {**chat, "ignore_eos": True})
        assert status == 200 and body["choices"][0]["finish_reason"] == "length", body
        assert body["usage"]["completion_tokens"] == 8, body
        plain = {"prompt": "Once upon a time", "max_tokens": 16, "ignore_eos": True}
        texts = [body["choices"][0]["text"] if status == 200 else f"HTTP {status}"
                 for status, body in (server.request("POST", "/v1/completions", plain) for _ in range(2))]
        assert texts[0] == texts[1] and not texts[0].startswith("HTTP"), texts  # temperature 0: greedy
        for bias, why in (({"x1": 1}, "is not a token id"), ({"5": 1000}, "[-100, 100]"), ([1], "object")):
            status, body = server.request("POST", "/v1/completions", {**plain, "logit_bias": bias})
            assert status == 400 and why in body["error"]["message"], f"{json.dumps(bias)}: {status} {body}"
            assert body["error"]["param"] == "logit_bias"
    finally:
        server.stop()

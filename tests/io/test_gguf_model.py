"""`mlaserve logits --model FILE.gguf` against the float64 oracle run on the values the file
holds: a random DeepSeek-V3 model (make-model) written as deepseek2 GGUFs by
tests/reference/gguf_model.py, one file per tensor type, llama.cpp's Q4_K_M mix, both attention
layouts, YaRN and an MTP layer; and GGUFs whose keys or tensors are wrong refused with an error
naming them.

--binary is mlaserve."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import deepseek_v3_ref  # noqa: E402
import gguf_model  # noqa: E402
import gguf_writer as gw  # noqa: E402
from bounds import EXACT_BOUND, relative_error  # noqa: E402

# Every projection's columns whole blocks of 256 (the k-quants' super-block), but attn_k_b's 64.
SHAPE = {"q_lora_rank": 256, "kv_lora_rank": 256, "qk_nope_head_dim": 64, "v_head_dim": 64,
         "moe_intermediate_size": 256, "n_routed_experts": 16, "n_group": 4, "topk_group": 2,
         "num_experts_per_tok": 4, "num_nextn_predict_layers": 1}
YARN = {"rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 64, "beta_fast": 32,
                         "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}}
# name: (tensor type, layout, Q4_K_M mix, config override)
CASES = {t: (t, "mla", None, {}) for t in ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K",
                                            "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "Q6_0")}
CASES.update({"Q4_K_M mix": ("Q4_K", "mla", "Q4_K_M", {}), "Q8_0, one attn_kv_b": ("Q8_0", "kv_b", None, {}),
              "Q4_K, YaRN, no q LoRA": ("Q4_K", "mla", None, dict(YARN, q_lora_rank=None))})


def make_model(binary, directory, override):
    if not os.path.exists(os.path.join(directory, "config.json")):
        subprocess.run([binary, "make-model", "--preset", "tiny", "--dtype", "bf16", "--seed", "11",
                        "--override", json.dumps(dict(SHAPE, **override)), directory], check=True, capture_output=True)
    return directory


@pytest.mark.parametrize("name", CASES)
def test_gguf_logits_match_the_oracle_on_the_files_values(binary, work_dir, name):
    type_name, layout, mixed, override = CASES[name]
    index = list(CASES).index(name)
    model = make_model(binary, os.path.join(work_dir, "yarn" if override else "model"), override)
    gguf, twin = os.path.join(work_dir, f"case{index}.gguf"), os.path.join(work_dir, f"twin{index}")
    types = gguf_model.convert(model, gguf, twin, type_name, layout, mixed)
    assert type_name in types.values()
    ids = np.random.default_rng(index).integers(0, 32000, size=24)
    out = os.path.join(work_dir, f"logits{index}.npy")
    try:  # each case's files go once read: the cases together would take gigabytes
        proc = subprocess.run([binary, "logits", "--model", gguf, "--ids", ",".join(map(str, ids)), "--out", out],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        got = np.load(out).astype(np.float64)
        want = deepseek_v3_ref.forward(twin, ids, "exact")
    finally:
        os.remove(gguf)
        shutil.rmtree(twin)
    error = relative_error(got, want)
    assert error <= EXACT_BOUND, f"max rel error {error:.2e} against the file's values"
    if type_name not in ("F32", "F16", "BF16"):  # the model is BF16 (exact in F16): the quantized types round it
        assert relative_error(got, deepseek_v3_ref.forward(model, ids, "exact")) > 10 * EXACT_BOUND


def corrupt(binary, work_dir, name, edit):
    """A Q8_0 GGUF of the model with its writer's metadata or tensors edited."""
    model = make_model(binary, os.path.join(work_dir, "model"), {})
    path = os.path.join(work_dir, f"bad-{name}.gguf")
    original = gw.GgufWriter.to_bytes

    def edited(writer):
        edit(writer)
        return original(writer)
    gw.GgufWriter.to_bytes = edited
    try:
        gguf_model.convert(model, path, None, "Q8_0", "mla")
    finally:
        gw.GgufWriter.to_bytes = original
    return path


def drop(key):
    return lambda writer: writer.metadata.pop(key)


def set_key(key, value, value_type):
    return lambda writer: writer.metadata.__setitem__(key, (value_type, value, None))


def rename_tensor(old, new):
    def edit(writer):
        writer.tensors = [(new if n == old else n, t, s, r) for n, t, s, r in writer.tensors]
    return edit


def swap_tensors(a, b):
    def edit(writer):
        writer.tensors = [({a: b, b: a}.get(n, n), t, s, r) for n, t, s, r in writer.tensors]
    return edit


def drop_tensor(name):
    def edit(writer):
        writer.tensors = [entry for entry in writer.tensors if entry[0] != name]
    return edit


BAD = {
    "no expert count": (drop("deepseek2.expert_count"), "key 'deepseek2.expert_count' is missing"),
    "llama": (set_key("general.architecture", "llama", gw.STRING), "general.architecture 'llama' is not supported"),
    "string count": (set_key("deepseek2.block_count", "5", gw.STRING), "key 'deepseek2.block_count' is \"5\""),
    "key length": (set_key("deepseek2.attention.key_length", 100, gw.U32), "are not kv_lora_rank + rope"),
    "gating": (set_key("deepseek2.expert_gating_func", 3, gw.U32), "expert_gating_func 3"),
    "rope scaling": (set_key("deepseek2.rope.scaling.type", "linear", gw.STRING), "rope.scaling.type 'linear'"),
    "unknown tensor": (rename_tensor("blk.0.attn_norm.weight", "blk.0.attn_sinks.weight"),
                       "tensor 'blk.0.attn_sinks.weight' is not one of deepseek2's"),
    "half a kv_b": (drop_tensor("blk.1.attn_v_b.weight"), "has only one of attn_k_b and attn_v_b"),
    "wrong shape": (swap_tensors("blk.0.ffn_up.weight", "blk.0.ffn_down.weight"),
                    "'model.layers.0.mlp.up_proj.weight' (GGUF 'blk.0.ffn_up.weight'): expected shape [512, 256], found [256, 512]"),
    "missing tensor": (drop_tensor("blk.2.ffn_gate_exps.weight"), "model.layers.2.mlp.experts.0.gate_proj.weight"),
    "more heads": (set_key("deepseek2.attention.head_count", 16, gw.U32),
                   "'blk.0.attn_k_b.weight' [8, 256, 64] and 'blk.0.attn_v_b.weight' [8, 64, 256] are not"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_keys_and_tensors_are_errors_naming_them(binary, work_dir, name):
    edit, needle = BAD[name]
    path = corrupt(binary, work_dir, name.replace(" ", "_"), edit)
    proc = subprocess.run([binary, "logits", "--model", path, "--ids", "1,2,3", "--out", path + ".npy"],
                          capture_output=True, text=True)
    os.remove(path)
    assert proc.returncode == 1, f"rc={proc.returncode}: {proc.stderr[-1000:]}"
    assert needle in proc.stderr, proc.stderr[-1000:]


def test_a_gguf_serves_chat_as_its_directory_does(binary, work_dir):
    """A BF16 GGUF holds the directory's values, tokenizer and chat template: the same chat
    request, greedy, gives the same text and token counts from both (the prefix cache's disk
    tier keying the file), and `perplexity` the same score."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
    from server_fixture import Server
    model = make_model(binary, os.path.join(work_dir, "model"), {})
    gguf = os.path.join(work_dir, "served.gguf")
    gguf_model.convert(model, gguf, None, "BF16")
    request = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello 123 你好"}],
               "max_tokens": 12, "temperature": 0}
    replies = []
    for served in (model, gguf):
        server = Server(binary, served, "--max-num-seqs", "2", "--prefix-cache-dir", os.path.join(work_dir, "blocks"))
        try:
            status, body = server.request("POST", "/v1/chat/completions", request)
            assert status == 200, body
            replies.append((body["choices"][0]["message"]["content"], body["usage"]["prompt_tokens"],
                            body["usage"]["completion_tokens"]))
        finally:
            assert server.stop() == 0
    assert replies[0] == replies[1], replies
    assert replies[0][1] > 10
    text = os.path.join(work_dir, "text.txt")
    with open(text, "w") as f:
        f.write("In the beginning God created the heaven and the earth. 1234 你好 " * 20)
    scores = [subprocess.run([binary, "perplexity", "--model", served, "--file", text, "--ctx", "64"], check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1] for served in (model, gguf)]
    assert scores[0] == scores[1] and "Final estimate: PPL = " in scores[0], scores
    os.remove(gguf)


def test_a_tokenizer_it_cannot_read_is_an_error_naming_the_key(binary, work_dir):
    path = corrupt(binary, work_dir, "qwen2_pre", set_key("tokenizer.ggml.pre", "qwen2", gw.STRING))
    proc = subprocess.run([binary, "generate", "--model", path, "--prompt", "In the", "-n", "2"],
                          capture_output=True, text=True)
    os.remove(path)
    assert proc.returncode == 1 and "tokenizer.ggml.pre 'qwen2' is not supported" in proc.stderr, proc.stderr[-1000:]
    proc = subprocess.run([binary, "perplexity", "--help"], capture_output=True, text=True)
    assert "model directory or .gguf file" in proc.stdout


def test_plan_and_bench_model_take_a_gguf(binary, work_dir):
    model = make_model(binary, os.path.join(work_dir, "model"), {})
    gguf = os.path.join(work_dir, "planned.gguf")
    gguf_model.convert(model, gguf, None, "Q6_K")
    plan = subprocess.run([binary, "plan", "--model", gguf, "--hardware", "cpu-dev-2core", "--devices", "1", "--tp", "1"],
                          capture_output=True, text=True)
    assert plan.returncode == 0 and "Layers (MLA / KDA):                     4 / 0" in plan.stdout, plan.stderr[-800:]
    bench = subprocess.run([binary, "bench-model", "--model", gguf, "-p", "16", "-n", "4"], capture_output=True, text=True)
    assert bench.returncode == 0 and "| tg4 " in bench.stdout, bench.stderr[-800:]
    os.remove(gguf)

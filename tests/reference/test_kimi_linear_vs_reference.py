"""mlaserve logits for Kimi Linear and Kimi K3 vs the float64 NumPy reference
(kimi_linear_ref.py), within the bounds of bounds.py, and the KDA prefill/decode agreement.
Besides make-model's presets, a Kimi K3 checkpoint laid out exactly as the published one
(k3_checkpoint.py: an independent writer; published names, text_config quantization, MXFP4
experts, shards, vision tensors) must load and match.
Run by CTest through pytest (tests/conftest.py)."""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_checkpoint  # noqa: E402
import kimi_linear_ref  # noqa: E402
from bounds import expected_logits, relative_error  # noqa: E402

OFF = ["--act-quant", "off"]
PUBLISHED = "published-k3"  # k3_checkpoint.write instead of a make-model preset
# name: (preset, dtype, config override, extra `logits` flags)
CASES = {
    "kimi-linear f32": ("kimi-linear-tiny", "f32", {}, []),
    "kimi-linear f32, decode path (chunk 1)": ("kimi-linear-tiny", "f32", {}, ["--chunk", "1"]),
    "kimi-linear f32, chunked prefill (chunk 5)": ("kimi-linear-tiny", "f32", {}, ["--chunk", "5"]),
    "kimi-linear f32, MLA first, no dense layer": (
        "kimi-linear-tiny", "f32",
        {"first_k_dense_replace": 0, "linear_attn_config": {"full_attn_layers": [1, 3], "kda_layers": [2, 4]}},
        []),
    "kimi-linear bf16": ("kimi-linear-tiny", "bf16", {}, []),
    "kimi-linear int4 experts": ("kimi-linear-tiny", "int4", {}, []),
    "kimi-linear int4 experts, --act-quant off": ("kimi-linear-tiny", "int4", {}, OFF),
    "kimi-k3 f32 (every K3 feature)": ("kimi-k3-tiny", "f32", {}, []),
    "kimi-k3 f32, decode path (chunk 1)": ("kimi-k3-tiny", "f32", {}, ["--chunk", "1"]),
    "kimi-k3 MXFP4 experts": ("kimi-k3-tiny", "mxfp4", {}, []),
    "kimi-k3 MXFP4 experts, --act-quant off": ("kimi-k3-tiny", "mxfp4", {}, OFF),
    "kimi-k3 MXFP4, blocks of 3, no latent norm": (
        "kimi-k3-tiny", "mxfp4", {"attn_res_block_size": 3, "latent_moe_use_norm": False}, []),
    "kimi-k3 as published (sharded, MXFP4 experts)": (PUBLISHED, "mxfp4", {}, []),
    "kimi-k3 as published, --act-quant off": (PUBLISHED, "mxfp4", {}, OFF),
    "kimi-k3 as published, --act-quant off, decode path (chunk 1)": (PUBLISHED, "mxfp4", {}, OFF + ["--chunk", "1"]),
}


def logits(binary, model, ids, *flags):
    out = os.path.join(model, "logits.npy")
    subprocess.run([binary, "logits", "--model", model, "--ids", ",".join(map(str, ids)), "--out", out, *flags],
                   check=True, capture_output=True)
    return np.load(out).astype(np.float64)


def make(binary, work, index, preset, dtype, override):
    model = os.path.join(work, f"kl{index}")
    subprocess.run([binary, "make-model", "--preset", preset, "--dtype", dtype, "--seed", str(300 + index),
                    "--override", json.dumps(override), model], check=True, capture_output=True)
    return model


def with_extra_tensor(model, out, name):
    """A copy of the model whose model.safetensors also holds an F32 [4] tensor `name`."""
    shutil.copytree(model, out, dirs_exist_ok=True)
    path = os.path.join(out, "model.safetensors")
    blob = open(path, "rb").read()
    size = struct.unpack("<Q", blob[:8])[0]
    header, data = json.loads(blob[8:8 + size]), blob[8 + size:]
    header[name] = {"dtype": "F32", "shape": [4], "data_offsets": [len(data), len(data) + 16]}
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    open(path, "wb").write(struct.pack("<Q", len(encoded)) + encoded + data + bytes(16))
    return out


_made = {}  # case name (or PUBLISHED, shared by its cases) -> its model directory, written once a run


def model_of(binary, work, name):
    preset, dtype, override, _ = CASES[name]
    key = PUBLISHED if preset == PUBLISHED else name
    if key not in _made:
        index = list(CASES).index(name)
        if preset == PUBLISHED:
            _made[key] = os.path.join(work, PUBLISHED)
            k3_checkpoint.write(_made[key], seed=index)
        else:
            _made[key] = make(binary, work, index, preset, dtype, override)
    return _made[key]


@pytest.mark.parametrize("name", CASES)
def test_logits_match_the_reference(binary, work_dir, name):
    _, dtype, _, flags = CASES[name]
    model = model_of(binary, work_dir, name)
    vocab = kimi_linear_ref.text_config(model)["vocab_size"]
    ids = np.random.default_rng(list(CASES).index(name)).integers(0, vocab, size=24)
    got = logits(binary, model, ids, *flags)
    int8_activations = dtype in ("int4", "mxfp4") and "off" not in flags
    want, bound = expected_logits(kimi_linear_ref.forward, model, ids, int8_activations)
    assert np.isfinite(got).all()
    error = relative_error(got, want)
    assert error <= bound, f"max rel error {error:.2e} (bound {bound:.0e})"


def test_kimi_k3_vision_tensors_are_skipped_and_unknown_ones_named(binary, work_dir):
    """The vision tower's tensors are skipped; an unknown text-model tensor is an error."""
    k3 = model_of(binary, work_dir, "kimi-k3 f32 (every K3 feature)")
    vision = with_extra_tensor(k3, os.path.join(work_dir, "k3-vision"), "vision_tower.patch_embed.weight")
    ok = subprocess.run([binary, "logits", "--model", vision, "--ids", "1,2", "--out", os.path.join(work_dir, "v.npy")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr[-300:]
    extra = with_extra_tensor(k3, os.path.join(work_dir, "k3-extra"), "language_model.model.extra.weight")
    bad = subprocess.run([binary, "logits", "--model", extra, "--ids", "1,2", "--out", os.path.join(work_dir, "e.npy")],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "unexpected tensor 'language_model.model.extra.weight'" in bad.stderr, bad.stderr


def test_prefill_equals_token_by_token_decode(binary, work_dir):
    """320 tokens: one prefill pass against the recurrent state carried over 320 decode steps."""
    model = model_of(binary, work_dir, "kimi-linear f32")
    ids = np.random.default_rng(99).integers(0, 32000, size=320)
    whole, steps = logits(binary, model, ids), logits(binary, model, ids, "--chunk", "1")
    assert relative_error(steps, whole) <= 1e-4

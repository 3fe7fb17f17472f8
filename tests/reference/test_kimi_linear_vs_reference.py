"""mlaserve logits for Kimi Linear and Kimi K3 vs the float64 NumPy reference
(kimi_linear_ref.py), within the bounds of bounds.py, and the KDA prefill/decode agreement.
Besides make-model's presets, a Kimi K3 checkpoint laid out exactly as the published one
(k3_checkpoint.py: an independent writer; published names, text_config quantization, MXFP4
experts, shards, vision tensors) must load and match.
Usage: test_kimi_linear_vs_reference.py MLASERVE WORK_DIR"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import k3_checkpoint  # noqa: E402
from checklist import check, finish  # noqa: E402
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


def prepare(binary, work, index, preset, dtype, override):
    if preset != PUBLISHED:
        return make(binary, work, index, preset, dtype, override)
    model = os.path.join(work, PUBLISHED)
    if not os.path.exists(model):
        k3_checkpoint.write(model, seed=index)
    return model


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    for index, (name, (preset, dtype, override, flags)) in enumerate(CASES.items()):
        model = prepare(binary, work, index, preset, dtype, override)
        vocab = kimi_linear_ref.text_config(model)["vocab_size"]
        ids = np.random.default_rng(index).integers(0, vocab, size=24)
        got = logits(binary, model, ids, *flags)
        int8_activations = dtype in ("int4", "mxfp4") and "off" not in flags
        want, bound = expected_logits(kimi_linear_ref.forward, model, ids, int8_activations)
        error = relative_error(got, want)
        check(f"{name}: max rel error {error:.2e} (bound {bound:.0e}), argmax agreement "
              f"{(got.argmax(-1) == want.argmax(-1)).mean():.0%}", np.isfinite(got).all() and error <= bound)
        if int8_activations:
            print(f"     int8 activations against the exact maths: max rel error "
                  f"{relative_error(got, kimi_linear_ref.forward(model, ids, 'exact')):.2e}")
    # Kimi K3: the vision tower's tensors are skipped; an unknown text-model tensor is an error.
    k3 = os.path.join(work, "kl7")
    vision = with_extra_tensor(k3, os.path.join(work, "k3-vision"), "vision_tower.patch_embed.weight")
    ok = subprocess.run([binary, "logits", "--model", vision, "--ids", "1,2", "--out", os.path.join(work, "v.npy")],
                        capture_output=True, text=True)
    check("kimi-k3: a checkpoint with vision-tower tensors loads (they are not run)", ok.returncode == 0)
    extra = with_extra_tensor(k3, os.path.join(work, "k3-extra"), "language_model.model.extra.weight")
    bad = subprocess.run([binary, "logits", "--model", extra, "--ids", "1,2", "--out", os.path.join(work, "e.npy")],
                         capture_output=True, text=True)
    check("kimi-k3: an unknown text-model tensor is an error naming it",
          bad.returncode == 1 and "unexpected tensor 'language_model.model.extra.weight'" in bad.stderr)
    # 320 tokens: one prefill pass vs token-by-token decode (recurrent state carried 320 steps).
    model = os.path.join(work, "kl0")
    ids = np.random.default_rng(99).integers(0, 32000, size=320)
    whole, steps = logits(binary, model, ids), logits(binary, model, ids, "--chunk", "1")
    error = relative_error(steps, whole)
    check(f"320 tokens: prefill == token-by-token decode (max rel error {error:.2e})", error <= 1e-4)
    finish()


if __name__ == "__main__":
    main()

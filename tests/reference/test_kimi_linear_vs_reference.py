"""mlaserve logits for Kimi Linear vs the float64 NumPy reference (kimi_linear_ref.py), and
the KDA prefill/decode agreement. Usage: test_kimi_linear_vs_reference.py MLASERVE WORK_DIR
Bound 1e-3 relative as for DeepSeek-V3 (same stored values on both sides; mlaserve's fp32
arithmetic, recurrence included, is ~1e-6 relative here), 3e-3 with 4-bit experts (see
test_logits_vs_reference.py: int8 activations, a rounding tie may fall either way)."""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kimi_linear_ref  # noqa: E402

TOLERANCE = {"f32": 1e-3, "bf16": 1e-3, "int4": 3e-3, "mxfp4": 3e-3}
# name: (preset, dtype, config override, extra `logits` flags)
CASES = {
    "kimi-linear f32": ("kimi-linear-tiny", "f32", {}, []),
    "kimi-linear f32, decode path (chunk 1)": ("kimi-linear-tiny", "f32", {}, ["--chunk", "1"]),
    "kimi-linear f32, chunked prefill (chunk 5)": ("kimi-linear-tiny", "f32", {}, ["--chunk", "5"]),
    "kimi-linear f32, MLA first, no dense layer": (
        "kimi-linear-tiny", "f32",
        {"first_k_dense_replace": 0, "linear_attn_config": {"full_attn_layers": [1, 3], "kda_layers": [2, 4],
                                                            "num_heads": 4, "head_dim": 32, "short_conv_kernel_size": 4}},
        []),
    "kimi-linear bf16": ("kimi-linear-tiny", "bf16", {}, []),
    "kimi-linear int4 experts": ("kimi-linear-tiny", "int4", {}, []),
    "kimi-k3 f32 (every K3 feature)": ("kimi-k3-tiny", "f32", {}, []),
    "kimi-k3 f32, decode path (chunk 1)": ("kimi-k3-tiny", "f32", {}, ["--chunk", "1"]),
    "kimi-k3 MXFP4 experts": ("kimi-k3-tiny", "mxfp4", {}, []),
    "kimi-k3 MXFP4, blocks of 3, no latent norm": (
        "kimi-k3-tiny", "mxfp4", {"text_config": {"attn_res_block_size": 3, "latent_moe_use_norm": False}}, []),
}
failures = []


def check(label, ok):
    print(f"{'ok  ' if ok else 'FAIL'} {label}")
    if not ok:
        failures.append(label)


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


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    for index, (name, (preset, dtype, override, flags)) in enumerate(CASES.items()):
        model = make(binary, work, index, preset, dtype, override)
        ids = np.random.default_rng(index).integers(0, 32000, size=24)
        got = logits(binary, model, ids, *flags)
        want = kimi_linear_ref.forward(model, ids)
        error = np.abs(got - want).max() / np.abs(want).max()
        check(f"{name}: max rel error {error:.2e}, argmax agreement {(got.argmax(-1) == want.argmax(-1)).mean():.0%}",
              np.isfinite(got).all() and error <= TOLERANCE[dtype])
    # Kimi K3: the vision tower's tensors are skipped; an unknown text-model tensor is an error.
    k3 = os.path.join(work, "kl6")
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
    error = np.abs(whole - steps).max() / np.abs(whole).max()
    check(f"320 tokens: prefill == token-by-token decode (max rel error {error:.2e})", error <= 1e-4)
    print(f"{len(CASES) + 3 - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

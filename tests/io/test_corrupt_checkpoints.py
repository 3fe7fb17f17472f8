"""Corrupt and fuzzed checkpoints must give a clear error and exit code 1, never a crash.

Run by CTest through pytest (tests/conftest.py): --binary (mlaserve) writes the good checkpoints;
--tool (checkpoint_probe, normally the ASan/UBSan build) loads each variant and runs a forward as
`mlaserve logits` does: any sanitizer report fails the case."""
import json
import os
import random
import shutil
import struct
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from checkpoint import read_safetensors  # noqa: E402

MICRO = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "q_lora_rank": 32,
         "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
         "moe_intermediate_size": 32, "intermediate_size": 96, "n_routed_experts": 16, "n_group": 4,
         "topk_group": 2, "num_experts_per_tok": 4, "vocab_size": 512}
SANITIZER_MARKS = ("Sanitizer", "runtime error:", "Segmentation fault", "Aborted")


def write_safetensors(path, tensors, align=True):
    """As the official writer, padding the header to 8 bytes unless align is False (the
    format allows unaligned data; mlaserve must then copy instead of using it in place)."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    if align:
        text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load(probe, model_dir, ids="1,2,3"):
    return subprocess.run([probe, model_dir, ids], capture_output=True, text=True, errors="replace", timeout=120)


def crashed(proc):
    return proc.returncode not in (0, 1) or any(mark in proc.stderr for mark in SANITIZER_MARKS)


def assert_error(probe, model_dir, needle=None, ids="1,2,3"):
    """Exit code 1 with an error naming the problem: no crash, no sanitizer report."""
    proc = load(probe, model_dir, ids)
    assert not crashed(proc) and proc.returncode == 1, f"rc={proc.returncode}, stderr: {proc.stderr.strip()[-400:]}"
    assert not needle or needle in proc.stderr, proc.stderr.strip()[-400:]


def variant(work, good, name, tensors=None, config_patch=None, raw_file=None):
    """A copy of the good model with its tensors, config or file bytes replaced."""
    directory = os.path.join(work, name)
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(good, directory)
    if tensors is not None:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
    if raw_file is not None:
        with open(os.path.join(directory, "model.safetensors"), "wb") as f:
            f.write(raw_file)
    if config_patch is not None:
        path = os.path.join(directory, "config.json")
        config = json.load(open(path))
        config.update(config_patch)
        json.dump(config, open(path, "w"))
    return directory


class Good:
    """The good FP8 checkpoint: its directory, file bytes, tensors and header length."""

    def __init__(self, binary, work, name, dtype):
        self.dir = os.path.join(work, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        subprocess.run([binary, "make-model", "--preset", "tiny", "--dtype", dtype, "--override", json.dumps(MICRO),
                        "--shard-mb", "0", self.dir], check=True, capture_output=True)
        self.blob = open(os.path.join(self.dir, "model.safetensors"), "rb").read()
        self.tensors = read_safetensors(os.path.join(self.dir, "model.safetensors"))
        (self.header_len,) = struct.unpack("<Q", self.blob[:8])


@pytest.fixture(scope="module")
def good(binary, work_dir):
    return Good(binary, work_dir, "good", "fp8")


@pytest.fixture(scope="module")
def int8(binary, work_dir):
    return Good(binary, work_dir, "int8", "int8")


def test_unaligned_data_is_valid_and_copied(tool, work_dir, good):
    unaligned = os.path.join(work_dir, "unaligned")
    shutil.rmtree(unaligned, ignore_errors=True)
    shutil.copytree(good.dir, unaligned)
    write_safetensors(os.path.join(unaligned, "model.safetensors"), good.tensors, align=False)
    proc = load(tool, unaligned)
    assert proc.returncode == 0, proc.stderr[-400:]


@pytest.mark.parametrize("where", ["start", "inside the length", "after the length", "inside the header",
                                   "inside the data", "before the last byte"])
def test_a_truncated_file(tool, work_dir, good, where):
    cut = {"start": 0, "inside the length": 5, "after the length": 8, "inside the header": 8 + good.header_len // 2,
           "inside the data": 8 + good.header_len + 100, "before the last byte": len(good.blob) - 1}[where]
    assert_error(tool, variant(work_dir, good.dir, "cut", raw_file=good.blob[:cut]), "model.safetensors")


def test_a_header_not_json(tool, work_dir, good):
    bad_json = good.blob[:8] + b"x" + good.blob[9:]
    assert_error(tool, variant(work_dir, good.dir, "json", raw_file=bad_json), "not valid JSON")


NORM = "model.layers.0.self_attn.kv_a_layernorm.weight"
MISSING = "model.layers.1.mlp.experts.3.up_proj.weight"


def tensors_with(tensors, case):
    """The tensors with one fault, and the words its error must hold."""
    changed = dict(tensors)
    dtype, shape, raw = tensors[NORM]
    if case == "wrong shape":
        changed[NORM] = (dtype, (shape[0] - 1,), raw[:-2])
        return changed, f"tensor '{NORM}': expected shape [32], found [31]"
    if case == "wrong dtype":
        changed[NORM] = ("I16", shape, raw)
        return changed, f"tensor '{NORM}': dtype I16"
    if case == "missing tensor":
        del changed[MISSING]
        return changed, f"missing tensor '{MISSING}'"
    if case == "missing FP8 scale":
        del changed[MISSING + "_scale_inv"]
        return changed, f"missing tensor '{MISSING}_scale_inv'"
    changed["model.layers.0.extra.weight"] = ("BF16", (2,), b"\0\0\0\0")
    return changed, "unexpected tensor 'model.layers.0.extra.weight'"


@pytest.mark.parametrize("case", ["wrong shape", "wrong dtype", "missing tensor", "missing FP8 scale", "extra tensor"])
def test_a_bad_tensor_is_named(tool, work_dir, good, case):
    tensors, needle = tensors_with(good.tensors, case)
    assert_error(tool, variant(work_dir, good.dir, "tensors", tensors), needle)


def test_int8_faults_are_named(tool, work_dir, int8):
    scale = MISSING.replace(".weight", ".weight_scale")
    assert_error(tool, variant(work_dir, int8.dir, "i8scale", {k: v for k, v in int8.tensors.items() if k != scale}),
                 f"missing tensor '{scale}' for INT8 weight")
    assert_error(tool, variant(work_dir, int8.dir, "i8config", config_patch={"quantization_config": None}),
                 "is I8 but config.json has no int-quantized")


@pytest.mark.parametrize("patch, needle", [
    ({"model_type": "llama"}, "model_type 'llama'"),
    ({"num_hidden_layers": 3}, "missing tensor 'model.layers.2."),
    ({"hidden_size": "64"}, "'hidden_size' must be an integer"),
], ids=["unknown model_type", "more layers than tensors", "config value of wrong type"])
def test_a_bad_config_is_named(tool, work_dir, good, patch, needle):
    assert_error(tool, variant(work_dir, good.dir, "config", config_patch=patch), needle)


def test_a_token_id_out_of_range(tool, good):
    assert_error(tool, good.dir, "token id 600 is outside", ids="1,600")


def test_no_checkpoint(tool, work_dir):
    assert_error(tool, os.path.join(work_dir, "nowhere"), "config.json")


def test_fuzzed_headers_never_crash(tool, work_dir, good):
    """150 headers with 1-4 bytes changed (mostly the digits of offsets and shapes): each loads or
    fails with exit code 1, with no sanitizer report."""
    rng = random.Random(1234)
    header = bytearray(good.blob[8:8 + good.header_len])
    digits = [i for i, c in enumerate(header) if chr(c).isdigit()]
    crashes = []
    for trial in range(150):
        mutated = bytearray(header)
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.6:  # change a number: offsets and shapes
                mutated[rng.choice(digits)] = ord(rng.choice("0123456789"))
            else:
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        raw = good.blob[:8] + bytes(mutated) + good.blob[8 + good.header_len:]
        proc = load(tool, variant(work_dir, good.dir, "fuzz", raw_file=raw))
        if crashed(proc):
            crashes.append(f"trial {trial}: rc={proc.returncode}, {proc.stderr.strip()[-300:]}")
    assert not crashes, crashes[:3]

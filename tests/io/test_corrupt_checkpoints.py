"""Corrupt and fuzzed checkpoints must give a clear error and exit code 1, never a crash.

Usage: test_corrupt_checkpoints.py MLASERVE PROBE WORK_DIR
MLASERVE writes the good checkpoints; PROBE (checkpoint_probe, normally the ASan/UBSan build) loads
each variant and runs a forward as `mlaserve logits` does: any sanitizer report fails the case."""
import json
import os
import random
import shutil
import struct
import subprocess
import sys

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


class Runner:
    def __init__(self, probe):
        self.probe, self.failures, self.count = probe, [], 0

    def load(self, model_dir, ids="1,2,3"):
        self.count += 1
        return subprocess.run([self.probe, model_dir, ids], capture_output=True, text=True, errors="replace",
                              timeout=120)

    def expect_error(self, label, model_dir, needle=None, ids="1,2,3"):
        proc = self.load(model_dir, ids)
        crashed = proc.returncode not in (0, 1) or any(mark in proc.stderr for mark in SANITIZER_MARKS)
        if crashed or proc.returncode != 1 or (needle and needle not in proc.stderr):
            self.failures.append(f"{label}: rc={proc.returncode}, stderr: {proc.stderr.strip()[-400:]}")

    def expect_ok(self, label, model_dir):
        proc = self.load(model_dir)
        if proc.returncode != 0:
            self.failures.append(f"{label}: rc={proc.returncode}, stderr: {proc.stderr.strip()[-400:]}")

    def expect_no_crash(self, label, model_dir):
        proc = self.load(model_dir)
        if proc.returncode not in (0, 1) or any(mark in proc.stderr for mark in SANITIZER_MARKS):
            self.failures.append(f"{label}: rc={proc.returncode}, stderr: {proc.stderr.strip()[-400:]}")


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


def main():
    binary, probe, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    good = os.path.join(work, "good")
    subprocess.run([binary, "make-model", "--preset", "tiny", "--dtype", "fp8", "--override", json.dumps(MICRO),
                    "--shard-mb", "0", good], check=True, capture_output=True)
    run = Runner(probe)
    blob = open(os.path.join(good, "model.safetensors"), "rb").read()
    tensors = read_safetensors(os.path.join(good, "model.safetensors"))
    (header_len,) = struct.unpack("<Q", blob[:8])

    unaligned = os.path.join(work, "unaligned")
    shutil.copytree(good, unaligned)
    write_safetensors(os.path.join(unaligned, "model.safetensors"), tensors, align=False)
    run.expect_ok("unaligned data (valid, copied)", unaligned)

    for cut in (0, 5, 8, 8 + header_len // 2, 8 + header_len + 100, len(blob) - 1):
        run.expect_error(f"truncated at {cut}", variant(work, good, "cut", raw_file=blob[:cut]), "model.safetensors")
    bad_json = blob[:8] + b"x" + blob[9:]
    run.expect_error("header not JSON", variant(work, good, "json", raw_file=bad_json), "not valid JSON")

    name = "model.layers.0.self_attn.kv_a_layernorm.weight"
    dtype, shape, raw = tensors[name]
    wrong = dict(tensors)
    wrong[name] = (dtype, (shape[0] - 1,), raw[:-2])
    run.expect_error("wrong shape", variant(work, good, "shape", wrong), f"tensor '{name}': expected shape [32], found [31]")
    wrong = dict(tensors)
    wrong[name] = ("I16", shape, raw)
    run.expect_error("wrong dtype", variant(work, good, "dtype", wrong), f"tensor '{name}': dtype I16")
    missing = "model.layers.1.mlp.experts.3.up_proj.weight"
    run.expect_error("missing tensor", variant(work, good, "missing", {k: v for k, v in tensors.items() if k != missing}),
                     f"missing tensor '{missing}'")
    scale = "model.layers.1.mlp.experts.3.up_proj.weight_scale_inv"
    run.expect_error("missing FP8 scale", variant(work, good, "scale", {k: v for k, v in tensors.items() if k != scale}),
                     f"missing tensor '{scale}'")
    int8 = os.path.join(work, "int8")
    subprocess.run([binary, "make-model", "--preset", "tiny", "--dtype", "int8", "--override", json.dumps(MICRO),
                    "--shard-mb", "0", int8], check=True, capture_output=True)
    int8_tensors = read_safetensors(os.path.join(int8, "model.safetensors"))
    scale = "model.layers.1.mlp.experts.3.up_proj.weight_scale"
    run.expect_error("missing INT8 scale", variant(work, int8, "i8scale", {k: v for k, v in int8_tensors.items() if k != scale}),
                     f"missing tensor '{scale}' for INT8 weight")
    run.expect_error("INT8 weights without their config", variant(work, int8, "i8config", config_patch={"quantization_config": None}),
                     "is I8 but config.json has no int-quantized")
    extra = dict(tensors)
    extra["model.layers.0.extra.weight"] = ("BF16", (2,), b"\0\0\0\0")
    run.expect_error("extra tensor", variant(work, good, "extra", extra), "unexpected tensor 'model.layers.0.extra.weight'")

    run.expect_error("unknown model_type", variant(work, good, "type", config_patch={"model_type": "llama"}), "model_type 'llama'")
    run.expect_error("more layers than tensors", variant(work, good, "layers", config_patch={"num_hidden_layers": 3}),
                     "missing tensor 'model.layers.2.")
    run.expect_error("config value of wrong type", variant(work, good, "cfgtype", config_patch={"hidden_size": "64"}),
                     "'hidden_size' must be an integer")
    run.expect_error("token id out of range", good, "token id 600 is outside", ids="1,600")
    run.expect_error("no checkpoint", os.path.join(work, "nowhere"), "config.json")

    rng = random.Random(1234)
    header = bytearray(blob[8:8 + header_len])
    digits = [i for i, c in enumerate(header) if chr(c).isdigit()]
    for trial in range(150):
        mutated = bytearray(header)
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.6:  # change a number: offsets and shapes
                mutated[rng.choice(digits)] = ord(rng.choice("0123456789"))
            else:
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        raw = blob[:8] + bytes(mutated) + blob[8 + header_len:]
        run.expect_no_crash(f"fuzz trial {trial}", variant(work, good, "fuzz", raw_file=raw))

    for failure in run.failures:
        print("FAIL " + failure)
    print(f"{run.count - len(run.failures)} passed, {len(run.failures)} failed")
    sys.exit(1 if run.failures else 0)


if __name__ == "__main__":
    main()

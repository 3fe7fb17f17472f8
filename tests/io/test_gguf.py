"""mlaserve's GGUF reader against files written here from the format's definition
(tests/reference/gguf_writer.py): every metadata type read back, every tensor type's values equal
to the NumPy dequantization (tests/reference/ggml_quants.py) bit for bit on random blocks with
extreme fp16 scales, split sets, and corrupt files refused with an error naming the problem.

--binary is gguf_dump (tests/io/gguf_dump.cc): it writes the metadata and each tensor's values."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import ggml_quants as gq  # noqa: E402
import gguf_writer as gw  # noqa: E402

QUANTIZED = [name for name in gq.TYPES if name not in ("F32", "F16", "BF16")]


def dump(binary, path, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    proc = subprocess.run([binary, path, out_dir], capture_output=True, text=True, errors="replace", timeout=60)
    return proc


def read_dump(binary, path, out_dir):
    proc = dump(binary, path, out_dir)
    assert proc.returncode == 0, proc.stderr
    tensors = {}
    for line in proc.stdout.splitlines():
        index, name, type_name, _ = line.split(" ", 3)
        tensors[name] = (type_name, np.load(os.path.join(out_dir, index + ".npy")))
    return json.load(open(os.path.join(out_dir, "metadata.json"))), tensors


def assert_error(binary, path, out_dir, needle):
    proc = dump(binary, path, out_dir)
    assert proc.returncode == 1, f"rc={proc.returncode}: {proc.stderr.strip()}"
    assert needle in proc.stderr, proc.stderr.strip()


def test_every_type_dequantizes_as_the_reference_bit_for_bit(binary, work_dir):
    rng = np.random.default_rng(7)
    writer, expected = gw.GgufWriter(), {}
    for type_name in QUANTIZED:
        block = gq.TYPES[type_name][1]
        shape = (6, 2 * block)  # 12 blocks, a third with extreme scales
        raw = gq.random_blocks(type_name, 12, rng)
        writer.add_tensor(type_name.lower(), type_name, shape, raw)
        expected[type_name.lower()] = gq.dequantize(type_name, raw, 12 * block).reshape(shape)
    for type_name in ("F32", "F16", "BF16"):
        values = (rng.standard_normal((3, 5, 8)) * 100).astype(np.float32)
        raw = gq.quantize(type_name, values)
        writer.add_tensor(type_name.lower(), type_name, values.shape, raw)
        expected[type_name.lower()] = gq.dequantize(type_name, raw, values.size).reshape(values.shape)
    path = os.path.join(work_dir, "types.gguf")
    writer.write(path)
    _, tensors = read_dump(binary, path, os.path.join(work_dir, "types"))
    assert sorted(tensors) == sorted(expected)
    for name, want in expected.items():
        got = tensors[name][1]
        assert got.shape == want.shape, name
        mismatch = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
        assert mismatch.size == 0, f"{name}: {mismatch.size} values differ, first at {mismatch[0]}: " \
                                   f"{got.reshape(-1)[mismatch[0]]} != {want.reshape(-1)[mismatch[0]]}"


@pytest.mark.parametrize("type_name", QUANTIZED)
def test_reference_quantizers_write_what_they_mean(type_name):
    """The quantizers the model tests use: their blocks read back near the values they were given
    (a layout written wrongly reads back as noise)."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal(4 * 256).astype(np.float32)
    back = gq.dequantize(type_name, gq.quantize(type_name, values), values.size)
    bits = 4 if type_name.startswith("IQ4") else int(type_name[1])  # Q6_0: 6
    error = np.sqrt(np.mean((back - values) ** 2))
    assert error < 2.5 / 2 ** bits, f"{type_name}: rms error {error:.4f}"


def test_metadata_of_every_type(binary, work_dir):
    writer = gw.GgufWriter(alignment=64)
    values = {"u8": (gw.U8, 200), "i8": (gw.I8, -100), "u16": (gw.U16, 60000), "i16": (gw.I16, -30000),
              "u32": (gw.U32, 4000000000), "i32": (gw.I32, -2000000000), "u64": (gw.U64, 2 ** 63 + 5),
              "i64": (gw.I64, -2 ** 62), "f32": (gw.F32, 0.5), "f64": (gw.F64, 1e300), "yes": (gw.BOOL, True),
              "no": (gw.BOOL, False), "text": (gw.STRING, "naïve ✓"), "general.alignment": (gw.U32, 64)}
    for key, (value_type, value) in values.items():
        writer.add(key, value, value_type)
    writer.add("tokens", ["a", "", "ü"], gw.ARRAY, gw.STRING)
    writer.add("scores", [1.5, -2.0], gw.ARRAY, gw.F32)
    writer.add("empty", [], gw.ARRAY, gw.I32)
    writer.add_tensor("t", "F32", (4,), np.arange(4, dtype=np.float32).tobytes())
    path = os.path.join(work_dir, "metadata.gguf")
    writer.write(path)
    metadata, tensors = read_dump(binary, path, os.path.join(work_dir, "metadata"))
    for key, (_, value) in values.items():
        assert metadata[key] == value, key
    assert metadata["tokens"] == ["a", "", "ü"] and metadata["scores"] == [1.5, -2.0] and metadata["empty"] == []
    assert tensors["t"][1].tolist() == [0, 1, 2, 3]


def split_set(directory, parts=3):
    paths = []
    for k in range(parts):
        writer = gw.GgufWriter()
        writer.add("split.no", k, gw.U16)
        writer.add("split.count", parts, gw.U16)
        writer.add("split.tensors.count", parts, gw.I32)
        writer.add_tensor(f"t{k}", "F32", (2,), np.full(2, k, np.float32).tobytes())
        paths.append(os.path.join(directory, f"model-{k + 1:05}-of-{parts:05}.gguf"))
        writer.write(paths[-1])
    return paths


def test_split_sets_open_from_their_first_part(binary, work_dir):
    directory = os.path.join(work_dir, "split")
    os.makedirs(directory, exist_ok=True)
    paths = split_set(directory)
    _, tensors = read_dump(binary, paths[0], os.path.join(directory, "dump"))
    assert {name: t[1].tolist() for name, t in tensors.items()} == {"t0": [0, 0], "t1": [1, 1], "t2": [2, 2]}
    assert_error(binary, paths[1], os.path.join(directory, "dump"), "give its first part")
    os.remove(paths[2])
    assert_error(binary, paths[0], os.path.join(directory, "dump"), "model-00003-of-00003.gguf")


def good_file():
    writer = gw.GgufWriter()
    writer.add("general.architecture", "deepseek2")
    writer.add_tensor("w", "Q8_0", (2, 64), gq.quantize("Q8_0", np.ones(128, np.float32)))
    return writer


CORRUPTIONS = {
    "magic": (lambda b: b"GGML" + b[4:], "not a GGUF file"),
    "version": (lambda b: b[:4] + (1).to_bytes(4, "little") + b[8:], "GGUF version 1 is not supported"),
    "truncated data": (lambda b: b[:-40], "runs past the"),
    "truncated header": (lambda b: b[:60], "truncated at byte"),
    "huge counts": (lambda b: b[:8] + (2 ** 60).to_bytes(8, "little") + b[16:], "cannot fit"),
    "string past the end": (lambda b: b[:24] + (2 ** 40).to_bytes(8, "little") + b[32:], "runs past the end of the file"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_bytes_are_errors_naming_the_problem(binary, work_dir, case):
    corrupt, needle = CORRUPTIONS[case]
    path = os.path.join(work_dir, "corrupt.gguf")
    with open(path, "wb") as f:
        f.write(corrupt(good_file().to_bytes()))
    assert_error(binary, path, os.path.join(work_dir, "corrupt"), needle)


def test_bad_tensor_infos_are_errors_naming_the_tensor(binary, work_dir):
    path, out = os.path.join(work_dir, "bad.gguf"), os.path.join(work_dir, "bad")
    cases = [  # (tensor type, dims (torch order), needle)
        (16, (256,), "tensor 'w': type IQ2_XXS is not supported"),
        (99, (256,), "tensor 'w': type id 99 is not supported"),
        (137, (256,), "tensor 'w': type id 137 (ik_llama.cpp's own types start at 100) is not supported"),
        ("Q8_0", (2, 48), "tensor 'w': 2 rows of 48 elements are not whole 32-element blocks of Q8_0"),
        ("F32", (1, 1, 1, 1, 1), "tensor 'w': 5 dimensions"),
        ("F32", (2 ** 40, 2 ** 40), "tensor 'w': shape [1099511627776, 1099511627776] overflows"),
    ]
    for type_name, dims, needle in cases:
        writer = gw.GgufWriter()
        writer.add_tensor("w", type_name, dims, b"\0" * 4096)
        writer.write(path)
        assert_error(binary, path, out, needle)
    writer = good_file()
    writer.add("general.alignment", 24, gw.U32)
    writer.write(path)
    assert_error(binary, path, out, "general.alignment 24 is not a power of two")
    writer = good_file()
    writer.add_tensor("w", "F32", (2,), b"\0" * 8)
    writer.write(path)
    assert_error(binary, path, out, "tensor 'w' appears twice")
    writer = gw.GgufWriter()
    writer.add("k", "a")
    blob = bytearray(writer.to_bytes())
    blob[16:24] = (2).to_bytes(8, "little")  # a second copy of the key, after the header's counts
    blob[24:24] = gw._string("k") + gw.STRING.to_bytes(4, "little") + gw._string("b")
    with open(path, "wb") as f:
        f.write(bytes(blob))
    assert_error(binary, path, out, "key 'k' appears twice")

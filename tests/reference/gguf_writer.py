"""Writes GGUF files (version 3) from the format's definition (llama.cpp docs/gguf.md), sharing
no code with mlaserve: the header, typed metadata, tensor infos and aligned data."""
import struct

import numpy as np

from ggml_quants import TYPES

# Metadata value type ids.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALARS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
            I64: "<q", F64: "<d"}


def _string(text):
    raw = text.encode() if isinstance(text, str) else bytes(text)
    return struct.pack("<Q", len(raw)) + raw


def _guess_type(value):
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return U32 if 0 <= value < 2 ** 32 else I64
    if isinstance(value, float):
        return F32
    if isinstance(value, (str, bytes)):
        return STRING
    return ARRAY


def _value(value_type, value, element_type=None):
    if value_type == STRING:
        return _string(value)
    if value_type == ARRAY:
        element_type = element_type if element_type is not None else _guess_type(value[0]) if value else U32
        return struct.pack("<IQ", element_type, len(value)) + b"".join(_value(element_type, v) for v in value)
    return struct.pack(_SCALARS[value_type], value)


class GgufWriter:
    """metadata: {key: value} or {key: (type, value)} / (ARRAY, values, element type); tensors are
    (name, type name, torch shape outermost first, raw bytes)."""

    def __init__(self, alignment=32):
        self.metadata, self.tensors, self.alignment = {}, [], alignment

    def add(self, key, value, value_type=None, element_type=None):
        self.metadata[key] = (value_type if value_type is not None else _guess_type(value), value, element_type)

    def add_tensor(self, name, type_name, shape, raw):
        self.tensors.append((name, type_name, list(shape), bytes(raw)))

    def to_bytes(self):
        out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.metadata)))
        for key, (value_type, value, element_type) in self.metadata.items():
            out += _string(key) + struct.pack("<I", value_type) + _value(value_type, value, element_type)
        offset, data = 0, bytearray()
        for name, type_name, shape, raw in self.tensors:
            out += _string(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
            type_id = TYPES[type_name][0] if isinstance(type_name, str) else type_name  # an id: any type
            out += struct.pack("<IQ", type_id, offset)
            padded = raw + b"\0" * (-len(raw) % self.alignment)
            data += padded
            offset += len(padded)
        out += b"\0" * (-len(out) % self.alignment)
        return bytes(out + data)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.to_bytes())


def tensor_bytes(type_name, shape):
    _, block, nbytes = TYPES[type_name]
    return int(np.prod(shape)) // block * nbytes

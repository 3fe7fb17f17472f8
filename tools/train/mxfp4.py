"""MXFP4 quantization the OCP MX way, as Kimi K3 ships its routed experts: per 32 columns a
shared E8M0 exponent floor(log2 max|w|) - 2, each value the nearest E2M1 code (saturating at
6). NumPy only: the trainer's export and the tests' published-layout K3 writer both use it."""
import numpy as np

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def quantize(weight):
    """(packed uint8 [rows, cols / 2], low nibble the even column; E8M0 uint8 [rows, cols / 32])."""
    rows, cols = weight.shape
    groups = weight.reshape(rows, cols // 32, 32)
    amax = np.abs(groups).max(-1, keepdims=True)
    exponent = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - 2, -127)
    scaled = groups / 2.0 ** exponent
    codes = np.abs(np.abs(scaled)[..., None] - E2M1).argmin(-1)  # nearest; past 6 saturates at code 7
    codes = np.where((scaled < 0) & (codes > 0), codes | 8, codes).reshape(rows, cols).astype(np.uint8)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), (exponent[..., 0] + 127).astype(np.uint8)

"""What the latent cache's dtype costs against the float64 oracle with an unrounded cache.

A random tiny model with dense layers only (no routing, whose near-ties would flip an expert
and move a logit by a whole expert's output) prefills 1,024 random tokens with
`--kv-cache-dtype fp32`, `bf16` and `fp8`; each position's logits are compared with the
oracle's (max |error| over the vocabulary / max |oracle logit|). Measured on this case: fp32
8.9e-7, bf16 9.4e-4, fp8 1.35e-2 at worst, the worst at the first positions (a position
attends to few rows, whose rounding averages out as the context grows); at 16,384 positions
(docs/correctness.md) fp8 is 1.2e-2 in the first quarter and 5.0e-4 in the last. Bounds:
twice the measured worst; and the error must not grow with position (the known failure of a
broken FP8 cache: a scale or rounding error that accumulates)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_v3_ref  # noqa: E402
from bounds import EXACT_BOUND  # noqa: E402

POSITIONS = int(os.environ.get("MLASERVE_ACCURACY_POSITIONS", "1024"))  # 16384: docs/correctness.md's figures
BOUND = {"fp32": EXACT_BOUND, "bf16": 2e-3, "fp8": 2.7e-2}


@pytest.fixture(scope="module")
def model_and_oracle(binary, work_dir):
    model = os.path.join(work_dir, "dense_tiny")
    subprocess.run([binary, "make-model", "--preset", "tiny", "--dtype", "f32", "--seed", "11", "--override",
                    json.dumps({"first_k_dense_replace": 4, "max_position_embeddings": max(4096, POSITIONS)}), model], check=True, capture_output=True)
    ids = np.random.default_rng(3).integers(0, 32000, size=POSITIONS)
    ids_file = os.path.join(work_dir, "ids.txt")
    np.savetxt(ids_file, ids[None], fmt="%d", delimiter=",")
    return model, ids_file, deepseek_v3_ref.forward(model, ids, "exact")


@pytest.mark.parametrize("dtype", list(BOUND))
def test_cache_dtype_against_the_oracle(binary, work_dir, model_and_oracle, dtype):
    model, ids_file, want = model_and_oracle
    out = os.path.join(work_dir, f"logits_{dtype}.npy")
    subprocess.run([binary, "logits", "--model", model, "--ids-file", ids_file, "--out", out, "--kv-cache-dtype", dtype],
                   check=True, capture_output=True)
    got = np.load(out).astype(np.float64)
    error = np.abs(got - want).max(-1) / np.abs(want).max()  # per position
    print(f"{dtype}: worst {error.max():.2e}; by quarter", [f"{q.max():.2e}" for q in np.split(error, 4)])
    assert error.max() <= BOUND[dtype], f"{dtype}: {error.max():.2e} > {BOUND[dtype]:.0e}"
    if dtype != "fp32":
        quarters = [q.max() for q in np.split(error, 4)]
        assert quarters[3] <= quarters[0], f"{dtype}'s error grows with position: {quarters}"
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.99

"""FlashInfer's sampling ops as mlaserve implements them (kernels/sampling.h) against the NumPy
reference (tests/reference/sampling_ref.py) on the random rows sampling_ops_dump writes: the
same kept tokens exactly (ties included), the same probabilities to float32 rounding, the same
sampled ids and speculative-sampling outcomes. Run by CTest through pytest (--binary: the dump
tool)."""
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import sampling_ref as ref  # noqa: E402

RENORM_BOUND = 2e-7  # float32 rounding of p / sum (measured: at most one ulp)


@pytest.fixture(scope="module")
def dumps(binary, work_dir):
    for name in ("small", "large", "chain"):
        os.makedirs(os.path.join(work_dir, name), exist_ok=True)
    subprocess.run([binary, work_dir], check=True)
    return work_dir


def load(directory, name):
    return np.load(os.path.join(directory, name + ".npy"))


def assert_rows_match(label, got, want):
    """The same kept tokens, and the kept probabilities within float32 rounding."""
    if np.isfinite(want).all():
        assert np.array_equal(got != 0, want != 0), f"{label}: different tokens kept"
    else:
        assert np.array_equal(np.isinf(got), np.isinf(want)), f"{label}: different tokens kept"
    finite = np.isfinite(want)
    error = np.abs(got[finite] - want[finite]).max() if finite.any() else 0.0
    assert error <= RENORM_BOUND, f"{label}: max error {error:.1e}"


@pytest.mark.parametrize("name", ["small", "large"])  # vocabularies of 50 and 5000
def test_filters_and_sampling(dumps, name):
    directory = os.path.join(dumps, name)
    probs, logits = load(directory, "probs"), load(directory, "logits")
    top_k = load(directory, "top_k").astype(np.int64)
    top_p, min_p, uniforms = load(directory, "top_p"), load(directory, "min_p"), load(directory, "uniforms")
    rows = range(len(probs))
    assert_rows_match("top_k_renorm_probs", load(directory, "top_k_renorm"),
                      np.array([ref.top_k_renorm(probs[r], top_k[r]) for r in rows]))
    assert_rows_match("top_p_renorm_probs", load(directory, "top_p_renorm"),
                      np.array([ref.top_p_renorm(probs[r], float(top_p[r])) for r in rows]))
    assert_rows_match("min_p_renorm_probs", load(directory, "min_p_renorm"),
                      np.array([ref.min_p_renorm(probs[r], min_p[r]) for r in rows]))
    masked = load(directory, "top_k_mask")
    want = np.array([ref.top_k_mask(logits[r], top_k[r]) for r in rows])
    assert np.array_equal(np.isinf(masked), np.isinf(want)), "top_k_mask_logits: different tokens masked"
    assert np.array_equal(masked[np.isfinite(want)], want[np.isfinite(want)]), "top_k_mask_logits: kept logits changed"
    kept = np.isfinite(masked).sum(axis=1)
    for r in rows:  # exactly k tokens survive, ties included
        assert kept[r] == (len(probs[r]) if top_k[r] <= 0 or top_k[r] >= len(probs[r]) else top_k[r]), f"row {r}"
    sampled = load(directory, "sampled").astype(np.int64)
    assert list(sampled) == [ref.sample(probs[r], float(uniforms[r])) for r in rows], "sampling_from_probs"
    sampled = load(directory, "top_k_top_p_sampled").astype(np.int64)
    assert list(sampled) == [ref.top_k_top_p_sample(probs[r], top_k[r], float(top_p[r]), float(uniforms[r]))
                             for r in rows], "top_k_top_p_sampling_from_probs"


def test_chain_speculative_sampling(dumps):
    """Ids, accepted and emitted counts as the reference's in every row."""
    directory = os.path.join(dumps, "chain")
    draft, target = load(directory, "draft_probs"), load(directory, "target_probs")
    draft_ids, uniforms = load(directory, "draft_ids").astype(np.int64), load(directory, "chain_uniforms")
    output = load(directory, "output_ids").astype(np.int64)
    accepted, emitted = load(directory, "accepted").astype(np.int64), load(directory, "emitted").astype(np.int64)
    counts = []
    for r in range(len(draft)):
        want_out, want_accepted, want_emitted = ref.chain_speculative(draft[r], draft_ids[r], target[r], uniforms[r])
        assert np.array_equal(output[r], want_out) and accepted[r] == want_accepted and emitted[r] == want_emitted, \
            f"row {r}"
        counts.append(want_emitted)
    assert len(set(counts)) > 2, "rows should stop at different positions, and some accept every draft"

"""FlashInfer's sampling ops as mlaserve implements them (kernels/sampling.h) against the NumPy
reference (tests/reference/sampling_ref.py) on the random rows sampling_ops_dump writes: the
same kept tokens exactly (ties included), the same probabilities to float32 rounding, the same
sampled ids and speculative-sampling outcomes.
Usage: test_sampling_ops.py SAMPLING_OPS_DUMP WORK_DIR"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import sampling_ref as ref  # noqa: E402

RENORM_BOUND = 2e-7  # float32 rounding of p / sum (measured: at most one ulp)
failures = []


def check(label, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + label + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(label)


def load(directory, name):
    return np.load(os.path.join(directory, name + ".npy"))


def compare_rows(label, got, want):
    same_support = np.array_equal(got != 0, want != 0) if np.isfinite(want).all() else \
        np.array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    error = np.abs(got[finite] - want[finite]).max() if finite.any() else 0.0
    check(f"{label}: same kept tokens, max error {error:.1e}", same_support and error <= RENORM_BOUND,
          f"support equal {same_support}")


def check_filters(directory, name):
    probs, logits = load(directory, "probs"), load(directory, "logits")
    top_k = load(directory, "top_k").astype(np.int64)
    top_p, min_p, uniforms = load(directory, "top_p"), load(directory, "min_p"), load(directory, "uniforms")
    rows = range(len(probs))
    compare_rows(f"{name} top_k_renorm_probs", load(directory, "top_k_renorm"),
                 np.array([ref.top_k_renorm(probs[r], top_k[r]) for r in rows]))
    compare_rows(f"{name} top_p_renorm_probs", load(directory, "top_p_renorm"),
                 np.array([ref.top_p_renorm(probs[r], float(top_p[r])) for r in rows]))
    compare_rows(f"{name} min_p_renorm_probs", load(directory, "min_p_renorm"),
                 np.array([ref.min_p_renorm(probs[r], min_p[r]) for r in rows]))
    masked = load(directory, "top_k_mask")
    want = np.array([ref.top_k_mask(logits[r], top_k[r]) for r in rows])
    check(f"{name} top_k_mask_logits: same tokens masked, kept logits unchanged",
          np.array_equal(np.isinf(masked), np.isinf(want)) and np.array_equal(masked[np.isfinite(want)],
                                                                              want[np.isfinite(want)]))
    kept = np.isfinite(masked).sum(axis=1)
    exact_k = all(kept[r] == (len(probs[r]) if top_k[r] <= 0 or top_k[r] >= len(probs[r]) else top_k[r]) for r in rows)
    check(f"{name} top-k keeps exactly k tokens on ties", exact_k)
    sampled = load(directory, "sampled").astype(np.int64)
    want_ids = [ref.sample(probs[r], float(uniforms[r])) for r in rows]
    check(f"{name} sampling_from_probs: the reference's id in every row", list(sampled) == want_ids)
    sampled = load(directory, "top_k_top_p_sampled").astype(np.int64)
    want_ids = [ref.top_k_top_p_sample(probs[r], top_k[r], float(top_p[r]), float(uniforms[r])) for r in rows]
    check(f"{name} top_k_top_p_sampling_from_probs: the reference's id in every row", list(sampled) == want_ids)


def check_chain(directory):
    draft, target = load(directory, "draft_probs"), load(directory, "target_probs")
    draft_ids, uniforms = load(directory, "draft_ids").astype(np.int64), load(directory, "chain_uniforms")
    output = load(directory, "output_ids").astype(np.int64)
    accepted, emitted = load(directory, "accepted").astype(np.int64), load(directory, "emitted").astype(np.int64)
    same, counts = True, []
    for r in range(len(draft)):
        want_out, want_accepted, want_emitted = ref.chain_speculative(draft[r], draft_ids[r], target[r], uniforms[r])
        same &= np.array_equal(output[r], want_out) and accepted[r] == want_accepted and emitted[r] == want_emitted
        counts.append(want_emitted)
    spread = len(set(counts)) > 2  # rows stop at different positions, and some accept every draft
    check(f"chain_speculative_sampling: ids, accepted and emitted as the reference in {len(draft)} rows "
          f"(emitted {min(counts)}..{max(counts)})", same and spread)


def main():
    binary, work = sys.argv[1], sys.argv[2]
    for name in ("small", "large", "chain"):
        os.makedirs(os.path.join(work, name), exist_ok=True)
    subprocess.run([binary, work], check=True)
    check_filters(os.path.join(work, "small"), "vocab 50")
    check_filters(os.path.join(work, "large"), "vocab 5000")
    check_chain(os.path.join(work, "chain"))
    print(f"{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

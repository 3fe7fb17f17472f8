"""FlashInfer's sampling ops in NumPy, written from their documented semantics, with the total
order mlaserve states (value descending, then id ascending) so that ties have one answer. Each
function takes one row (or one row's chain) and works in float64."""
import numpy as np


def order(values):
    """Ids by value descending, lower id first on ties."""
    return np.lexsort((np.arange(len(values)), -values.astype(np.float64)))


def top_k_ids(values, k):
    if k <= 0 or k >= len(values):
        return np.arange(len(values))
    return order(values)[:k]


def top_p_ids(probs, p):
    if p >= 1:
        return np.arange(len(probs))
    ranked = order(probs)
    mass = np.cumsum(probs[ranked].astype(np.float64))
    target = p * mass[-1]
    # the shortest prefix whose mass reaches the target; at least one token
    keep = 1 + int(np.searchsorted(mass, target, side="left")) if target > 0 else 1
    return ranked[:min(keep, len(probs))]


def min_p_ids(probs, min_p):
    if min_p <= 0:
        return np.arange(len(probs))
    return np.nonzero(probs >= min(min_p, 1.0) * probs.max())[0]


def renormalised(probs, ids):
    out = np.zeros(len(probs))
    out[ids] = probs[ids].astype(np.float64) / probs[ids].astype(np.float64).sum()
    return out


def top_k_renorm(probs, k):
    return renormalised(probs, top_k_ids(probs, k))


def top_p_renorm(probs, p):
    return renormalised(probs, top_p_ids(probs, p))


def min_p_renorm(probs, min_p):
    return renormalised(probs, min_p_ids(probs, min_p))


def top_k_mask(logits, k):
    out = np.full(len(logits), -np.inf)
    ids = top_k_ids(logits, k)
    out[ids] = logits[ids]
    return out


def sample(probs, u):
    """The first id whose cumulative probability exceeds u times the total."""
    mass = np.cumsum(probs.astype(np.float64))
    return int(min(np.searchsorted(mass, u * mass[-1], side="right"), len(probs) - 1))


def top_k_top_p_sample(probs, k, p, u):
    kept = top_k_ids(probs, k)
    filtered = np.zeros(len(probs))
    filtered[kept] = probs[kept]
    nucleus = top_p_ids(filtered, p) if p < 1 else kept
    final = np.zeros(len(probs))
    final[nucleus] = probs[nucleus]
    return sample(final, u)


def chain_speculative(draft_probs, draft_ids, target_probs, uniforms):
    """One row: draft_probs [K, V], draft_ids [K], target_probs [K + 1, V], uniforms [K + 1]
    -> (output ids [K + 1] with -1 after the last, accepted, emitted)."""
    k = len(draft_ids)
    accepts = [float(uniforms[i]) * float(draft_probs[i, d]) < float(target_probs[i, d])
               for i, d in enumerate(draft_ids)]
    emitted = accepts.index(False) if False in accepts else k
    last = target_probs[emitted].astype(np.float64)
    if emitted < k:
        residual = np.maximum(0.0, target_probs[emitted] - draft_probs[emitted]).astype(np.float64)
        if residual.sum() > 0:
            last = residual
    out = np.full(k + 1, -1)
    out[:emitted] = draft_ids[:emitted]
    out[emitted] = sample(last, float(uniforms[k]))
    return out, sum(accepts), emitted

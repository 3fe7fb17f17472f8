"""How close mlaserve's logits must be to the float64 reference, shared by the reference tests.

Error measure: max |mlaserve - reference| / max |reference| over all logits.

EXACT_BOUND holds wherever mlaserve's maths is the stored model's exactly (f32, BF16, FP8,
INT8 weights; INT4 and MXFP4 with --act-quant off): both sides dequantise the same stored
values exactly (every format is exact in fp32), so the only difference is mlaserve's fp32
arithmetic, measured at 1.6e-7 to 2.5e-6 over these tiny models (6.8e-6 over a 200-token
Kimi K3 prefill).

By default INT4 and MXFP4 weights meet int8-rounded activations (--act-quant int8), and the
reference rounds its activations the same way (checkpoint.Weights). It then agrees to ~1e-6
unless an activation lies within float rounding of a .5 tie, which the two sides may round
apart by one step; on these random models one such step has moved the logits by up to 7.7e-3
(Kimi K3's attention-residual mixes amplify it). So the bound for int8 activations is made per
case: twice how far the reference itself moves when its near-ties (checkpoint.NEAR_TIE) round
the other way, and never under EXACT_BOUND. Not rounding at all errs by 4e-3 (DeepSeek-V3
INT4) to 0.35 (a published-layout Kimi K3 with MXFP4 experts): what int8 activations cost.
"""
import numpy as np

EXACT_BOUND = 1e-5


def relative_error(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def expected_logits(forward, model, ids, int8_activations, **options):
    """(reference logits, bound) for mlaserve's logits of `ids` with or without int8 activations;
    options go to forward."""
    if not int8_activations:
        return forward(model, ids, "exact", **options), EXACT_BOUND
    want = forward(model, ids, "int8", **options)
    flipped = forward(model, ids, "int8, ties flipped", **options)
    return want, max(EXACT_BOUND, 2 * relative_error(flipped, want))

"""DeepSeek-V3's MTP layer as mlaserve runs it (model/deepseek_mtp.h, through mtp_dump) against
the float64 NumPy reference (deepseek_v3_ref.mtp), on random f32 and bf16 models with an MTP
layer written by make-model: the target's final hidden states, the MTP logits of every row as
one prefill chunk and one row at a time, and one chained row on the module's own state, all
within EXACT_BOUND.
Run by CTest through pytest (--binary mlaserve, --tool mtp_dump)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import deepseek_v3_ref as ref  # noqa: E402
from bounds import EXACT_BOUND, relative_error  # noqa: E402


@pytest.mark.parametrize("name, dtype, override, seed",
                         [("f32", "f32", {}, 7), ("bf16 no q LoRA", "bf16", {"q_lora_rank": None}, 8)])
def test_mtp_matches_the_reference(binary, tool, work_dir, name, dtype, override, seed):
    model = os.path.join(work_dir, name.replace(" ", "_"))
    subprocess.run([binary, "make-model", "--preset", "tiny", "--dtype", dtype, "--seed", str(seed), "--override",
                    json.dumps(dict(override, num_nextn_predict_layers=1)), model], check=True, capture_output=True)
    ids = np.random.default_rng(seed).integers(0, 32000, size=20)
    subprocess.run([tool, model, model, ",".join(map(str, ids))], check=True, capture_output=True)
    got = {name: np.load(os.path.join(model, name + ".npy")).astype(np.float64)
           for name in ("hidden", "mtp_prefill", "mtp_decode", "mtp_chained", "chained_token")}
    cfg, w = ref.load(model, "exact")
    hidden = ref.final_hidden(cfg, w, ids)
    assert relative_error(got["hidden"], hidden) <= EXACT_BOUND, "final hidden states"
    states, logits = ref.mtp(cfg, w, hidden[:-1], ids[1:])
    for form in ("mtp_prefill", "mtp_decode"):  # every row as one prefill chunk, and one row at a time
        assert relative_error(got[form], logits) <= EXACT_BOUND, form
    drafted = int(got["chained_token"][0])
    _, chained = ref.mtp(cfg, w, np.concatenate([hidden[:-1], states[-1:]]), np.append(ids[1:], drafted))
    assert relative_error(got["mtp_chained"], chained[-1:]) <= EXACT_BOUND, "a chained row on the module's own state"
    assert drafted == int(logits[-1].argmax()), "the drafted token is the reference's argmax"

"""DeepSeek-V3's MTP layer as mlaserve runs it (model/deepseek_mtp.h, through mtp_dump) against
the float64 NumPy reference (deepseek_v3_ref.mtp), on random f32 and bf16 models with an MTP
layer written by make-model: the target's final hidden states, the MTP logits of every row as
one prefill chunk and one row at a time, and one chained row on the module's own state, all
within EXACT_BOUND.
Usage: test_mtp_vs_reference.py MLASERVE MTP_DUMP WORK_DIR"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import deepseek_v3_ref as ref  # noqa: E402
from bounds import EXACT_BOUND, relative_error  # noqa: E402
from checklist import check, finish  # noqa: E402


def run_case(binary, dump, work, name, dtype, override, seed):
    model = os.path.join(work, name.replace(" ", "_"))
    subprocess.run([binary, "make-model", "--preset", "tiny", "--dtype", dtype, "--seed", str(seed), "--override",
                    json.dumps(dict(override, num_nextn_predict_layers=1)), model], check=True, capture_output=True)
    ids = np.random.default_rng(seed).integers(0, 32000, size=20)
    subprocess.run([dump, model, model, ",".join(map(str, ids))], check=True, capture_output=True)
    got = {name: np.load(os.path.join(model, name + ".npy")).astype(np.float64)
           for name in ("hidden", "mtp_prefill", "mtp_decode", "mtp_chained", "chained_token")}
    cfg, w = ref.load(model, "exact")
    hidden = ref.final_hidden(cfg, w, ids)
    check(f"{name}: final hidden states, max rel error {relative_error(got['hidden'], hidden):.1e}",
          relative_error(got["hidden"], hidden) <= EXACT_BOUND)
    states, logits = ref.mtp(cfg, w, hidden[:-1], ids[1:])
    for form in ("mtp_prefill", "mtp_decode"):
        error = relative_error(got[form], logits)
        check(f"{name}: MTP logits of {len(ids) - 1} rows ({form[4:]}), max rel error {error:.1e}", error <= EXACT_BOUND)
    drafted = int(got["chained_token"][0])
    _, chained = ref.mtp(cfg, w, np.concatenate([hidden[:-1], states[-1:]]), np.append(ids[1:], drafted))
    error = relative_error(got["mtp_chained"], chained[-1:])
    check(f"{name}: a chained row on the module's own state, max rel error {error:.1e}; drafted token is the "
          f"reference's argmax", error <= EXACT_BOUND and drafted == int(logits[-1].argmax()))


def main():
    binary, dump, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    run_case(binary, dump, work, "f32", "f32", {}, 7)
    run_case(binary, dump, work, "bf16 no q LoRA", "bf16", {"q_lora_rank": None}, 8)
    finish()


if __name__ == "__main__":
    main()

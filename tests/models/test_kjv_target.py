"""The committed default model (models/kjv) through mlaserve against its PyTorch trainer.

- logits: mlaserve's on the BF16 checkpoint against the trainer's forward on the same ids
  (fp32 arithmetic both; bound 1e-4 relative), argmax agreeing everywhere;
- perplexity: `mlaserve perplexity` on the held-out books against the trainer's evaluation of
  the same export (weights dequantized by tests/reference/checkpoint.py), for BF16, FP8, INT4
  and MXFP4 (exported by tools/train/export.py), with exact activations (bound 1e-4 relative) and
  with int8 activations (bound 1%);
- golden: the first 64 greedy tokens of a few prompts, as pinned in tests/models/kjv_golden.json;
- drafts: each committed draft (MTP layer, dense draft, DFlash block draft) drafting greedily
  against the target's greedy continuation of held-out prompts (tools/train/acceptance.py)
  commits more than 1.4 tokens a target forward on average (1: no draft).
Usage: test_kjv_target.py MLASERVE WORK_DIR [--chunks N]"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "reference"),
                os.path.join(ROOT, "tools", "train")]
import acceptance  # noqa: E402
import bpe  # noqa: E402
import checkpoint as reference_checkpoint  # noqa: E402  (tests/reference: the independent reader)
import corpus  # noqa: E402
import data  # noqa: E402
import export  # noqa: E402
import target  # noqa: E402
from checklist import check, finish  # noqa: E402

MODEL = os.path.join(ROOT, "models", "kjv")
CTX = 256


def torch_model(model_dir):
    """The trainer's model with the checkpoint's weights, dequantized by the reference reader."""
    weights = reference_checkpoint.Weights(model_dir)
    config = json.load(open(os.path.join(model_dir, "config.json")))
    model = target.new_model(0, dict(config, num_nextn_predict_layers=0))  # the MTP layer is not run
    state = model.state_dict()
    for name in state:
        hf = target.hf_name(name)
        matrix = hf.endswith(".weight") and len(state[name].shape) == 2
        value = weights.linear(hf[: -len(".weight")]) if matrix else weights.get(hf)
        state[name] = torch.from_numpy(np.asarray(value, np.float32))
    model.load_state_dict(state)
    return model.eval()


def mlaserve_logits(binary, model_dir, ids, work):
    out = os.path.join(work, "logits.npy")
    subprocess.run([binary, "logits", "--model", model_dir, "--ids", ",".join(map(str, ids)), "--out", out],
                   check=True, capture_output=True)
    return np.load(out).astype(np.float64)


def mlaserve_perplexity(binary, model_dir, text_file, chunks, *flags):
    out = subprocess.run([binary, "perplexity", "--model", model_dir, "--file", text_file, "--ctx", str(CTX),
                          "--chunks", str(chunks), *flags], check=True, capture_output=True, text=True).stdout
    return float(re.search(r"PPL = ([0-9.]+)", out).group(1))


def logits_check(binary, work):
    model = torch_model(MODEL)
    ids = torch.tensor(json.load(open(os.path.join(HERE, "kjv_golden.json")))["logits_ids"])
    with torch.no_grad():
        want = model(ids.unsqueeze(0))[0].double().numpy()
    got = mlaserve_logits(binary, MODEL, ids.tolist(), work)
    error = np.abs(got - want).max() / np.abs(want).max()
    check(f"logits of the committed target: mlaserve vs the trainer's forward, max rel error {error:.2e} (bound 1e-4)",
          error <= 1e-4 and (got.argmax(-1) == want.argmax(-1)).all())


def perplexity_checks(binary, work, chunks):
    encoder = bpe.Encoder([tuple(m.split(" ")) for m in json.load(open(os.path.join(MODEL, "tokenizer.json")))["model"]["merges"]])
    held_text = corpus.splits()[1]
    text_file = os.path.join(work, "heldout.txt")
    open(text_file, "w").write(held_text)
    ids = data.Corpus(encoder, held_text).ids[: chunks * CTX]
    for fmt in ("bf16", "fp8", "int4", "mxfp4"):
        model_dir = MODEL if fmt == "bf16" else os.path.join(work, f"kjv-{fmt}")
        if fmt != "bf16" and not os.path.exists(os.path.join(model_dir, "config.json")):
            export.export(fmt, MODEL, model_dir)
        trained = torch_model(model_dir)
        want = data.perplexity(trained, ids, encoder.special_ids[bpe.BOS], CTX)[0]
        exact = mlaserve_perplexity(binary, model_dir, text_file, chunks, "--act-quant", "off")
        check(f"{fmt}: perplexity {exact:.4f} (exact activations) vs the trainer's {want:.4f}",
              abs(exact / want - 1) <= 1e-4)
        if fmt in ("int4", "mxfp4"):
            int8 = mlaserve_perplexity(binary, model_dir, text_file, chunks)
            check(f"{fmt}: perplexity {int8:.4f} with int8 activations, within 1% of {want:.4f}",
                  abs(int8 / want - 1) <= 0.01)


def golden_check(binary):
    golden = json.load(open(os.path.join(HERE, "kjv_golden.json")))
    for prompt, want in golden["greedy"].items():
        out = subprocess.run([binary, "generate", "--model", MODEL, "--prompt", prompt, "-n", "64", "--temperature",
                              "0", "--ignore-eos"], check=True, capture_output=True, text=True).stdout
        check(f"golden greedy continuation of {prompt!r}", out == want, f"got {out!r}, want {want!r}")


def acceptance_checks():
    merges = [tuple(m.split(" ")) for m in json.load(open(os.path.join(MODEL, "tokenizer.json")))["model"]["merges"]]
    prompts = acceptance.held_out_prompts(bpe.Encoder(merges), 4, 16)
    model = acceptance.load_model(MODEL, with_mtp=True)
    proposers = {"MTP layer, 3 chained": acceptance.MtpProposer(3),
                 "dense draft, 3 tokens": acceptance.DenseProposer(os.path.join(ROOT, "models", "kjv-draft"), 3),
                 "DFlash block draft": acceptance.DFlashProposer(os.path.join(ROOT, "models", "kjv-dflash"))}
    for name, proposer in proposers.items():
        length = acceptance.mean_accepted_length(model, proposer, prompts, 32)
        check(f"{name}: mean accepted length {length:.2f} over 4 held-out prompts", length > 1.4)


def main():
    binary, work = sys.argv[1], sys.argv[2]
    chunks = int(sys.argv[sys.argv.index("--chunks") + 1]) if "--chunks" in sys.argv else 1000
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)  # CTest runs other tests beside this one
    logits_check(binary, work)
    golden_check(binary)
    acceptance_checks()
    perplexity_checks(binary, work, chunks)
    finish()


if __name__ == "__main__":
    main()

"""Writes tests/models/kjv_golden.json: the ids the logits test feeds, and the first 64 greedy
tokens (as text) mlaserve generates for a few prompts, each checked against the trainer's own
greedy continuation (the same tokens) before it is pinned.

  /usr/bin/python3 tools/train/golden.py MLASERVE models/kjv tests/models/kjv_golden.json"""
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import acceptance  # noqa: E402
import bpe  # noqa: E402
import hf_checkpoint  # noqa: E402
import corpus  # noqa: E402

PROMPTS = ["In the beginning", "And the LORD said unto Moses,", "Blessed are the", "The kingdom of heaven is like"]


def main():
    binary, model_dir, out = sys.argv[1:4]
    torch.set_num_threads(2)
    merges = [tuple(m.split(" ")) for m in hf_checkpoint.read_json(os.path.join(model_dir, "tokenizer.json"))["model"]["merges"]]
    encoder = bpe.Encoder(merges)
    bos = encoder.special_ids[bpe.BOS]
    model = acceptance.load_model(model_dir)
    golden = {"logits_ids": [bos] + encoder.encode(corpus.splits()[1].splitlines()[0])[:31], "greedy": {}}
    for prompt in PROMPTS:
        text = subprocess.run([binary, "generate", "--model", model_dir, "--prompt", prompt, "-n", "64", "--temperature",
                               "0", "--ignore-eos"], check=True, capture_output=True, text=True).stdout
        ids = torch.tensor([bos] + encoder.encode(prompt))
        want = acceptance.greedy(model, ids, 64)[len(ids):].tolist()
        decoded = bytes(b for i in want for b in token_bytes(encoder, i)).decode("utf-8", "replace")
        if decoded != text:
            raise SystemExit(f"mlaserve and the trainer disagree on {prompt!r}:\n{text!r}\n{decoded!r}")
        golden["greedy"][prompt] = text
    hf_checkpoint.write_json(out, golden)


def token_bytes(encoder, token):
    chars = {c: b for b, c in bpe.BYTE_CHARS.items()}
    text = next(t for t, i in encoder.vocab.items() if i == token)
    return bytes(chars[c] for c in text)


if __name__ == "__main__":
    main()

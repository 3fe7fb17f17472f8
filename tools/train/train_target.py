"""Trains the default target on the KJV corpus and writes it as a Hugging Face checkpoint.

  /usr/bin/python3 tools/train/train_target.py --out models/kjv-target [--steps N --seed S]

Deterministic for a seed (single-threaded data, seeded torch); logs loss and time."""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import hf_checkpoint  # noqa: E402
import corpus  # noqa: E402
import data  # noqa: E402
import target  # noqa: E402


def train(model, train_corpus, args, log):
    """Next-token cross-entropy, the routers' score-correction biases updated after each step."""
    def loss_of(batch):
        logits = model(batch[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
    return data.optimise(model.parameters(), loss_of, train_corpus, args, log, weight_decay=0.1,
                         after_step=lambda: target.update_biases(model, args.bias_rate))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--bias-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--bf16", type=int, default=1, help="1: products in bf16 (torch.autocast), 0: fp32")
    parser.add_argument("--train-chars", type=int, default=0, help="use only the first N characters (smoke runs)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    log = lambda line: print(line, flush=True)  # noqa: E731
    train_text, held_text = corpus.splits()
    if args.train_chars:
        train_text = train_text[:args.train_chars]
    merges = bpe.train(train_text, target.CONFIG["vocab_size"])
    encoder = bpe.Encoder(merges)
    model = target.new_model(args.seed)
    log(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")
    losses, seconds = train(model, data.Corpus(encoder, train_text), args, log)
    model.eval()
    tensors = target.state_tensors(model)
    target.load_state(model, tensors)  # evaluated as exported: weights rounded to bf16
    held = data.Corpus(encoder, held_text).ids
    ppl, nll, count = data.perplexity(model, held, encoder.special_ids[bpe.BOS], 256)
    log(f"trained {args.steps} steps in {seconds:.0f} s; held-out perplexity {ppl:.3f} (loss {nll:.4f}, {count} tokens)")
    config = dict(target.CONFIG, bos_token_id=encoder.special_ids[bpe.BOS], eos_token_id=encoder.special_ids[bpe.EOS])
    hf_checkpoint.write_model(args.out, config, tensors,
                           {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]})
    bpe.write(args.out, encoder, merges)
    log(f"wrote '{args.out}'")


if __name__ == "__main__":
    main()

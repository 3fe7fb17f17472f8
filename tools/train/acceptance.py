"""Offline acceptance of the drafts: greedy speculative decoding simulated against the target's
greedy continuation of held-out prompts. Each step the draft proposes up to K tokens after the
committed ones; the target accepts the longest prefix equal to its own greedy tokens and adds
one (the bonus token). Mean accepted length = tokens committed per target forward.

  /usr/bin/python3 tools/train/acceptance.py --target models/kjv [--dense DIR] [--dflash DIR]"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import hf_checkpoint  # noqa: E402
import corpus  # noqa: E402
import drafts  # noqa: E402
import target  # noqa: E402
from model import DeepseekV3, rope_tables  # noqa: E402


@torch.no_grad()
def greedy(model, prefix, n):
    ids = prefix.clone()
    for _ in range(n):
        ids = torch.cat([ids, model(ids.unsqueeze(0))[0, -1].argmax().view(1)])
    return ids


def load_model(model_dir, with_mtp=False):
    config = hf_checkpoint.read_json(os.path.join(model_dir, "config.json"))
    model = DeepseekV3(config if with_mtp else dict(config, num_nextn_predict_layers=0))
    tensors = hf_checkpoint.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    if config.get("tie_word_embeddings"):
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    target.load_state(model, tensors)
    if with_mtp:
        layer = f"model.layers.{config['num_hidden_layers']}."
        state = model.mtp.state_dict()
        for name in state:
            stored = "shared_head.norm.weight" if name == "norm.weight" else name.replace("layer.", "", 1)
            state[name] = tensors[layer + stored].float()
        model.mtp.load_state_dict(state)
    return model.eval()


class DenseProposer:
    def __init__(self, model_dir, k):
        self.model, self.k = load_model(model_dir), k

    @torch.no_grad()
    def propose(self, target_model, committed):
        return greedy(self.model, committed, self.k)[len(committed):]


class MtpProposer:
    """The MTP layer chained k times: its own normed output replaces the target's hidden state."""

    def __init__(self, k):
        self.k = k

    @torch.no_grad()
    def propose(self, target_model, committed):
        _, final = target_model.hidden_states(committed[:-1].unsqueeze(0))
        hidden, tokens, out = final, committed[1:].unsqueeze(0), []
        for _ in range(self.k):
            cos, sin = rope_tables(target_model.cfg, tokens.shape[1])
            states = target_model.mtp(hidden, target_model.embed_tokens(tokens), cos, sin)
            token = target_model.lm_head(states[0, -1]).argmax().view(1, 1)
            out.append(int(token))
            hidden, tokens = torch.cat([hidden, states[:, -1:]], 1), torch.cat([tokens, token], 1)
        return torch.tensor(out)


class DFlashProposer:
    def __init__(self, model_dir):
        self.config = hf_checkpoint.read_json(os.path.join(model_dir, "config.json"))
        self.model = drafts.DFlashDraft(self.config)
        tensors = hf_checkpoint.read_safetensors(os.path.join(model_dir, "model.safetensors"))
        self.model.load_state_dict({k: v.float() for k, v in tensors.items()})
        self.model.eval()

    @torch.no_grad()
    def propose(self, target_model, committed):
        block, layers = self.config["block_size"], self.config["dflash_config"]["target_layer_ids"]
        p = len(committed) - 1  # committed[p] is the bonus token the target has not seen
        states, _ = target_model.hidden_states(committed[:p].unsqueeze(0))
        features = torch.cat([states[i + 1] for i in layers], -1)
        tokens = torch.full((1, block), self.config["dflash_config"]["mask_token_id"])
        tokens[0, 0] = committed[p]
        positions = torch.arange(p, p + block)
        mask = torch.ones(1, block, p + block, dtype=torch.bool)
        out = self.model(target_model.embed_tokens(tokens), features, positions, torch.arange(p), mask)
        logits, drafted = target_model.lm_head(out)[0], []
        previous = int(committed[p])
        for j in range(1, block):  # left to right: the Markov head sees the token drafted before
            row = logits[j] + (self.model.markov(torch.tensor(previous)) if hasattr(self.model, "markov_w1") else 0)
            previous = int(row.argmax())
            drafted.append(previous)
        return torch.tensor(drafted)


def mean_accepted_length(target_model, proposer, prompts, new_tokens):
    accepted, steps = 0, 0
    for prompt in prompts:
        reference = greedy(target_model, prompt, new_tokens)
        committed = reference[: len(prompt) + 1]  # the prefill's first token
        while len(committed) < len(reference):
            proposal = proposer.propose(target_model, committed)
            want = reference[len(committed):]
            match = 0
            while match < min(len(proposal), len(want) - 1) and proposal[match] == want[match]:
                match += 1
            committed = reference[: len(committed) + match + 1]
            accepted += match + 1
            steps += 1
    return accepted / steps


def held_out_prompts(encoder, count, length):
    bos = encoder.special_ids[bpe.BOS]
    verses = corpus.splits()[1].splitlines()
    step = max(1, len(verses) // count)
    return [torch.tensor([bos] + encoder.encode(v)[:length]) for v in verses[::step][:count]]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--dense")
    parser.add_argument("--dflash")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    merges = [tuple(m.split(" ")) for m in hf_checkpoint.read_json(os.path.join(args.target, "tokenizer.json"))["model"]["merges"]]
    prompts = held_out_prompts(bpe.Encoder(merges), args.prompts, 16)
    config = hf_checkpoint.read_json(os.path.join(args.target, "config.json"))
    target_model = load_model(args.target, with_mtp=config.get("num_nextn_predict_layers", 0) > 0)
    proposers = {}
    if target_model.mtp is not None:
        proposers.update({f"mtp, {k} chained": MtpProposer(k) for k in (1, 3)})
    if args.dense:
        proposers.update({f"dense draft, {k} tokens": DenseProposer(args.dense, k) for k in (3, 5)})
    if args.dflash:
        proposers["dflash block"] = DFlashProposer(args.dflash)
    for name, proposer in proposers.items():
        print(f"{name}: mean accepted length {mean_accepted_length(target_model, proposer, prompts, args.new_tokens):.2f}",
              flush=True)


if __name__ == "__main__":
    main()

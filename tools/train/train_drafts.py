"""Trains the target's drafts against the frozen target and writes their checkpoints:

  /usr/bin/python3 tools/train/train_drafts.py --target models/kjv --kind mtp|dense|dflash \\
      --out DIR [--steps N --seed S]

mtp adds the MTP layer to the target's own checkpoint (DIR is then the target's directory);
dense and dflash write a checkpoint of their own (config.json, model.safetensors, tokenizer)."""
import argparse
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import hf_checkpoint  # noqa: E402
import corpus  # noqa: E402
import data  # noqa: E402
import drafts  # noqa: E402
import target  # noqa: E402
from model import DeepseekV3, Mtp  # noqa: E402

DENSE_CONFIG = dict(target.CONFIG, hidden_size=192, intermediate_size=512, num_hidden_layers=2, num_attention_heads=3,
                    num_key_value_heads=3, q_lora_rank=96, kv_lora_rank=48, first_k_dense_replace=2,
                    tie_word_embeddings=True)
DFLASH_CONFIG = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "attention_bias": False,
    "tie_word_embeddings": False, "max_position_embeddings": 1024, "block_size": 8, "num_target_layers": 6,
    "dflash_config": {"block_size": 8, "target_layer_ids": [1, 3, 5], "markov_rank": 32}}


def load_target(model_dir):
    config = hf_checkpoint.read_json(os.path.join(model_dir, "config.json"))
    model = DeepseekV3(dict(config, num_nextn_predict_layers=0))
    target.load_state(model, hf_checkpoint.read_safetensors(os.path.join(model_dir, "model.safetensors")))
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval(), config


class MtpTrainer:
    """The MTP layer on the target's final normed states: output i predicts token i + 2."""

    def __init__(self, target_model, config):
        self.target, self.module = target_model, Mtp(dict(config, num_nextn_predict_layers=1),
                                                     config["hidden_size"] ** -0.5 / 2)

    def loss(self, batch):
        from model import rope_tables
        with torch.no_grad():
            _, final = self.target.hidden_states(batch)
            wanted = self.target.lm_head(final)[:, 1:]  # the target's prediction of token i + 2
        cos, sin = rope_tables(self.target.cfg, batch.shape[1] - 1)
        out = self.module(final[:, :-1], self.target.embed_tokens(batch[:, 1:]), cos, sin)
        logits = self.target.lm_head(out)
        return drafts.distillation_loss(logits.reshape(-1, logits.shape[-1]), wanted.reshape(-1, wanted.shape[-1]))


class DenseTrainer:
    def __init__(self, target_model, config):
        self.target, self.module = target_model, DeepseekV3(dict(DENSE_CONFIG, vocab_size=config["vocab_size"]))
        self.module.lm_head.weight = self.module.embed_tokens.weight  # tied, at the head's scale
        torch.nn.init.normal_(self.module.embed_tokens.weight, 0.0, DENSE_CONFIG["hidden_size"] ** -0.5)

    def loss(self, batch):
        with torch.no_grad():
            wanted = self.target(batch)
        logits = self.module(batch)
        return drafts.distillation_loss(logits.reshape(-1, logits.shape[-1]), wanted.reshape(-1, wanted.shape[-1]))


class DFlashTrainer:
    """Blocks at random anchors a: [token a, mask x (B - 1)] see the target's features of
    positions < a and their own block; block position j is trained toward the target's
    distribution of token a + j."""

    def __init__(self, target_model, config, mask_token_id, anchors=12):
        self.target, self.anchors, self.mask = target_model, anchors, mask_token_id
        cfg = dict(DFLASH_CONFIG, vocab_size=config["vocab_size"])
        cfg["dflash_config"] = dict(cfg["dflash_config"], mask_token_id=mask_token_id)
        self.config, self.module = cfg, drafts.DFlashDraft(cfg)
        self.block = cfg["block_size"]

    def loss(self, batch):
        b, t = batch.shape
        block = self.block
        with torch.no_grad():
            states, final = self.target.hidden_states(batch)
            target_logits = self.target.lm_head(final)
            features = torch.cat([states[i + 1] for i in self.config["dflash_config"]["target_layer_ids"]], -1)
        anchors = torch.randperm(t - block - 1)[: self.anchors].sort().values + 1
        block_tokens = torch.full((b, len(anchors), block), self.mask, dtype=torch.long)
        block_tokens[:, :, 0] = batch[:, anchors]
        offsets = torch.arange(block)
        positions = (anchors[:, None] + offsets).reshape(-1)  # [A * B]
        key_positions = torch.arange(t)
        mask = torch.cat([key_positions[None, :] < anchors.repeat_interleave(block)[:, None],
                          torch.block_diag(*[torch.ones(block, block, dtype=torch.bool)] * len(anchors))], 1)
        out = self.module(self.target.embed_tokens(block_tokens.reshape(b, -1)), features, positions, key_positions,
                          mask.unsqueeze(0).expand(b, -1, -1))
        logits = self.target.lm_head(out).view(b, len(anchors), block, -1)
        if hasattr(self.module, "markov_w1"):
            previous = batch[:, (anchors[:, None] + offsets - 1).clamp(min=0)]
            logits = logits + self.module.markov(previous)
        wanted = target_logits[:, (anchors[:, None] + offsets - 1)]  # token a + j's distribution
        return drafts.distillation_loss(logits[:, :, 1:].reshape(-1, logits.shape[-1]),
                                        wanted[:, :, 1:].reshape(-1, logits.shape[-1]))


def train(trainer, train_corpus, args, log):
    def update_biases():  # the drafts' own MoE routers, as the target's
        for moe in getattr(trainer.module, "moe_layers", lambda: [])():
            moe.update_bias(1e-3)
        if isinstance(trainer.module, Mtp):
            trainer.module.layer.mlp.update_bias(1e-3)
    params = [p for p in trainer.module.parameters() if p.requires_grad]
    return data.optimise(params, trainer.loss, train_corpus, args, log, after_step=update_biases,
                         label="distillation loss")[1]


def bf16_tensors(module, prefix=""):
    return {prefix + name: t.detach().to(torch.bfloat16) for name, t in module.state_dict().items()}


def write_mtp(trainer, out, source):
    """The target's checkpoint with the MTP layer as layer num_hidden_layers (shared embedding and head)."""
    config = hf_checkpoint.read_json(os.path.join(source, "config.json"))
    tensors = hf_checkpoint.read_safetensors(os.path.join(source, "model.safetensors"))
    layer = f"model.layers.{config['num_hidden_layers']}."
    for name, tensor in trainer.module.state_dict().items():
        name = name.replace("layer.", "", 1) if name.startswith("layer.") else name
        name = "shared_head.norm.weight" if name == "norm.weight" else name
        keep_f32 = name.endswith("e_score_correction_bias")
        tensors[layer + name] = tensor.detach().float() if keep_f32 else tensor.detach().to(torch.bfloat16)
    config["num_nextn_predict_layers"] = 1
    if os.path.abspath(out) != os.path.abspath(source):
        shutil.copytree(source, out, dirs_exist_ok=True)
    hf_checkpoint.write_model(out, config, tensors)


def write_draft(kind, trainer, out, source):
    if kind == "dense":
        config = dict(DENSE_CONFIG, bos_token_id=trainer.target.cfg.get("bos_token_id"),
                      eos_token_id=trainer.target.cfg.get("eos_token_id"))
        tensors = {target.hf_name(n): t for n, t in bf16_tensors(trainer.module).items() if n != "lm_head.weight"}
        for name, tensor in trainer.module.state_dict().items():
            if name.endswith("e_score_correction_bias"):
                tensors[target.hf_name(name)] = tensor.float()
    else:
        config = {k: v for k, v in trainer.config.items()}
        tensors = bf16_tensors(trainer.module)
    hf_checkpoint.write_model(out, config, tensors)
    if kind == "dense":  # a model of its own; the block draft uses the target's tokenizer, as DFlash's do
        for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            shutil.copy(os.path.join(source, name), os.path.join(out, name))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--kind", choices=("mtp", "dense", "dflash"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16", type=int, default=1)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--train-chars", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    log = lambda line: print(line, flush=True)  # noqa: E731
    target_model, config = load_target(args.target)
    merges = [tuple(m.split(" ")) for m in hf_checkpoint.read_json(os.path.join(args.target, "tokenizer.json"))["model"]["merges"]]
    encoder = bpe.Encoder(merges)
    trainer = {"mtp": MtpTrainer, "dense": DenseTrainer,
               "dflash": lambda t, c: DFlashTrainer(t, c, encoder.special_ids[bpe.MASK])}[args.kind](target_model, config)
    log(f"{args.kind}: {sum(p.numel() for p in trainer.module.parameters()) / 1e6:.2f} M parameters")
    train_text = corpus.splits()[0]
    if args.train_chars:
        train_text = train_text[:args.train_chars]
    seconds = train(trainer, data.Corpus(encoder, train_text), args, log)
    log(f"trained {args.steps} steps in {seconds:.0f} s")
    if args.kind == "mtp":
        write_mtp(trainer, args.out, args.target)
    else:
        write_draft(args.kind, trainer, args.out, args.target)
    log(f"wrote '{args.out}'")


if __name__ == "__main__":
    main()

"""Token streams of the corpus, the training loop every model shares, and llama-perplexity's
evaluation."""
import math
import time

import torch
import torch.nn.functional as F

import bpe


class Corpus:
    """The corpus as one token stream (verses joined by newlines) and each verse's first token."""

    def __init__(self, encoder, text):
        newline = encoder.encode("\n")
        ids, starts = [], []
        for verse in text.splitlines():
            starts.append(len(ids))
            ids += encoder.encode(verse) + newline
        self.ids = torch.tensor(ids, dtype=torch.long)
        self.starts = torch.tensor(starts, dtype=torch.long)
        self.bos = encoder.special_ids[bpe.BOS]

    def batch(self, generator, batch_size, length):
        """[batch, length + 1]: BOS, then text from a random verse's start."""
        last = int((self.starts < len(self.ids) - length).sum())
        picks = self.starts[torch.randint(0, last, (batch_size,), generator=generator)]
        rows = [torch.cat([torch.tensor([self.bos]), self.ids[s:s + length]]) for s in picks.tolist()]
        return torch.stack(rows)


def learning_rate(step, steps, peak, warmup):
    """Linear warm-up, then cosine from the peak to a tenth of it."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup))))


def optimise(params, loss_of, train_corpus, args, log, weight_decay=0.0, after_step=lambda: None, label="loss"):
    """args.steps AdamW steps (betas 0.9/0.95, learning_rate's schedule, gradients clipped at 1)
    of loss_of(batch) on seeded batches of the corpus, products in bf16 when args.bf16;
    after_step() runs after each update. Returns (losses, seconds)."""
    params = list(params)
    optimizer = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(args.seed)
    start, losses = time.time(), []
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr, args.warmup)
        batch = train_corpus.batch(generator, args.batch, args.length)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(args.bf16)):
            loss = loss_of(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        after_step()
        losses.append(loss.item())
        if step % args.log_every == 0 or step == args.steps - 1:
            recent = losses[-args.log_every:]
            log(f"step {step}: {label} {sum(recent) / len(recent):.4f}, {time.time() - start:.0f} s")
    return losses, time.time() - start


@torch.no_grad()
def perplexity(logits_of, ids, bos, ctx):
    """llama.cpp's llama-perplexity (and `mlaserve perplexity`) on a text's ids: BOS before the
    text, chunks of ctx tokens, the first of each replaced by BOS, each scored on its second
    half (predictions of tokens ctx/2 + 1 .. ctx - 1). logits_of(ids [1, ctx]) -> [1, ctx,
    vocab]. Returns (perplexity, mean negative log-likelihood, tokens scored)."""
    ids = torch.cat([torch.tensor([bos]), ids])
    first, nll, count = ctx // 2, 0.0, 0
    for start in range(0, len(ids) - ctx + 1, ctx):
        chunk = ids[start:start + ctx].clone()
        chunk[0] = bos
        logits = logits_of(chunk.unsqueeze(0))[0].double()
        targets = chunk[first + 1:]
        nll += F.cross_entropy(logits[first:-1], targets, reduction="sum").item()
        count += len(targets)
    return math.exp(nll / count), nll / count, count

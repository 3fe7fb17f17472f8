"""Token streams of the corpus and llama-perplexity's evaluation over them."""
import math

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

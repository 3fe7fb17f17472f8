"""Byte-level BPE trained on the corpus and written as a Hugging Face tokenizer.json that
mlaserve's C++ tokenizer loads unchanged: a Split pre-tokenizer (GPT-2-like words, written with
ASCII classes so Python's re and PCRE2 split alike), then ByteLevel without its own regex,
merges in rank order, and DeepSeek-V3's special tokens (and a mask token) after the merged
vocabulary."""
import collections
import heapq
import json
import os
import re

PATTERN = r"'(?:s|t|re|ve|m|ll|d)| ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+"
BOS, EOS, USER, ASSISTANT = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"
MASK = "<｜mask｜>"  # the block drafts' mask token (DFlash's mask_token_id); never in the text
SPECIALS = (BOS, EOS, USER, ASSISTANT, MASK)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}"
    "{% elif message['role'] == 'assistant' %}{{ '<｜Assistant｜>' + message['content'] + eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}")


def byte_alphabet():
    """GPT-2's bytes_to_unicode: every byte as a printable character."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


BYTE_CHARS = byte_alphabet()


def pieces(text):
    return re.findall(PATTERN, text)


def symbols(piece):
    return tuple(BYTE_CHARS[b] for b in piece.encode("utf-8"))


def train(text, vocab_size):
    """Merges (pairs of byte-level strings, in rank order) giving vocab_size - len(SPECIALS)
    tokens: the 256 bytes and one per merge. Ties go to the lexicographically first pair."""
    words = [list(symbols(p)) for p in collections.Counter(pieces(text))]
    counts = list(collections.Counter(pieces(text)).values())
    pair_count, pair_words = collections.Counter(), collections.defaultdict(set)
    for w, (word, count) in enumerate(zip(words, counts)):
        for pair in zip(word, word[1:]):
            pair_count[pair] += count
            pair_words[pair].add(w)
    heap = [(-c, pair) for pair, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < vocab_size - len(SPECIALS) - 256 and heap:
        negative, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negative or -negative <= 0:
            continue  # stale entry
        merges.append(pair)
        merged = pair[0] + pair[1]
        for w in list(pair_words[pair]):
            word, count = words[w], counts[w]
            for old in zip(word, word[1:]):
                pair_count[old] -= count
            i, out = 0, []
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                    out.append(merged)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            words[w] = out
            for new in zip(out, out[1:]):
                pair_count[new] += count
                pair_words[new].add(w)
                heapq.heappush(heap, (-pair_count[new], new))
        del pair_count[pair]
    return merges


class Encoder:
    """Text -> ids with the trained merges (lowest rank first, as Hugging Face's BPE)."""

    def __init__(self, merges):
        self.ranks = {pair: i for i, pair in enumerate(merges)}
        self.vocab = {c: i for i, c in enumerate(sorted(BYTE_CHARS.values()))}
        for a, b in merges:
            self.vocab[a + b] = len(self.vocab)
        self.special_ids = {s: len(self.vocab) + i for i, s in enumerate(SPECIALS)}
        self.cache = {}

    def piece_ids(self, piece):
        if piece not in self.cache:
            word = list(symbols(piece))
            while len(word) > 1:
                ranked = [(self.ranks.get(pair, len(self.ranks)), i) for i, pair in enumerate(zip(word, word[1:]))]
                rank, i = min(ranked)
                if rank == len(self.ranks):
                    break
                word[i:i + 2] = [word[i] + word[i + 1]]
            self.cache[piece] = [self.vocab[s] for s in word]
        return self.cache[piece]

    def encode(self, text):
        return [i for p in pieces(text) for i in self.piece_ids(p)]

    def vocab_size(self):
        return len(self.vocab) + len(SPECIALS)


def write(model_dir, encoder, merges):
    """tokenizer.json and tokenizer_config.json (DeepSeek-V3's specials, BOS added, chat template)."""
    os.makedirs(model_dir, exist_ok=True)
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for s, i in encoder.special_ids.items()]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                            "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": encoder.vocab, "merges": [f"{a} {b}" for a, b in merges]}}
    with open(os.path.join(model_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": BOS, "eos_token": EOS,
              "clean_up_tokenization_spaces": False, "model_max_length": 1024, "tokenizer_class": "LlamaTokenizerFast",
              "chat_template": CHAT_TEMPLATE}
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)

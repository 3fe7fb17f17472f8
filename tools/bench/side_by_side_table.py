#!/usr/bin/python3
"""The table of scripts/side_by_side.sh: medians over rounds of mlaserve's bench-model and
ik_llama.cpp's llama-bench JSON results, the ratio mlaserve / ik per cell, each engine's bytes
read a decoded token and its decode speed against the machine's bandwidth roofline (the triad
bench-model measures in the same runs).
    GGUF_PY=IK_SRC/gguf-py tools/bench/side_by_side_table.py RESULTS_DIR WORK_DIR PRESET..."""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.environ.get("GGUF_PY", ""))
import gguf  # noqa: E402  (ik_llama.cpp's gguf-py, from GGUF_PY)


def median(values):
    return statistics.median(values) if values else float("nan")


def mlaserve_runs(results, preset, case):
    """prefill, decode, decode after 1024 cached, bytes a token, triad GB/s: lists over rounds."""
    runs = {"prefill": [], "decode": [], "depth": [], "bytes": [], "triad": []}
    for path in sorted(glob.glob(f"{results}/mlaserve-{preset}-{case}-[0-9]*.json")):
        r = json.load(open(path))
        runs["prefill"].append(r["prefill_tok_s"])
        runs["decode"].append(r["decode_tok_s"])
        runs["bytes"].append(r["bytes_per_decoded_token"])
        runs["triad"].append(r["membw_gb_s"])
    for path in sorted(glob.glob(f"{results}/mlaserve-depth-{preset}-{case}-[0-9]*.json")):
        r = json.load(open(path))
        runs["depth"].append(r["decode_tok_s"])
        runs["triad"].append(r["membw_gb_s"])
    return runs


def ik_runs(results, preset, gguf_type):
    runs = {"prefill": [], "decode": [], "depth": []}
    for path in sorted(glob.glob(f"{results}/ik-{preset}-{gguf_type}-*.json")):
        text = open(path).read().strip()
        for test in (json.loads(text) if text else []):
            kind = ("prefill" if test["n_gen"] == 0 else "decode" if test["n_prompt"] == 0 else "depth")
            runs[kind].append(test["avg_ts"])
    return runs


def gguf_bytes_per_token(path):
    """Bytes a decoded token reads: every tensor but the embedding table, experts k/E of theirs."""
    reader = gguf.GGUFReader(path)
    fields = {f.name: f for f in reader.fields.values()}
    def value(key):
        field = fields[key]
        return int(field.parts[field.data[0]][0])
    experts, used = value("deepseek2.expert_count"), value("deepseek2.expert_used_count")
    total = 0.0
    for tensor in reader.tensors:
        if tensor.name == "token_embd.weight":
            continue
        total += tensor.n_bytes * (used / experts if "_exps." in tensor.name else 1.0)
    return total


def row(cells):
    return "| " + " | ".join(cells) + " |"


def main():
    results, work, presets = sys.argv[1], sys.argv[2], sys.argv[3:]
    print(row(["model", "engine", "bytes/token", "prefill 512 tok/s", "decode tok/s", "decode at 1024 tok/s",
               "decode of the roofline"]))
    print(row(["---"] * 7))
    for preset in presets:
        for ours, theirs in (("int4", "q4_0"), ("int4-requantize-q4", "q4_0"), ("bf16", "bf16"),
                             ("bf16-terms", "bf16"), ("gguf-bf16", "bf16"), ("gguf-q8_0", "q8_0"),
                             ("gguf-q6_k", "q6_k"), ("gguf-q4_0", "q4_0"), ("gguf-q4_k", "q4_k")):
            m = mlaserve_runs(results, preset, ours)
            if not m["decode"]:
                continue  # a case this run left out (--cases)
            ik = ik_runs(results, preset, theirs)
            triad = max(m["triad"]) * 1e9 if m["triad"] else float("nan")
            m_bytes, ik_bytes = median(m["bytes"]), gguf_bytes_per_token(f"{work}/{preset}-{theirs}.gguf")
            cells = {k: (median(m[k]), median(ik[k])) for k in ("prefill", "decode", "depth")}
            print(row([f"{preset} {ours}", "mlaserve", f"{m_bytes / 1e6:.1f} MB"] +
                      [f"{cells[k][0]:.1f}" for k in ("prefill", "decode", "depth")] +
                      [f"{100 * cells['decode'][0] * m_bytes / triad:.0f}%"]))
            print(row([f"{preset} {theirs}", "ik_llama.cpp", f"{ik_bytes / 1e6:.1f} MB"] +
                      [f"{cells[k][1]:.1f}" for k in ("prefill", "decode", "depth")] +
                      [f"{100 * cells['decode'][1] * ik_bytes / triad:.0f}%"]))
            print(row([f"{preset} {ours}", "ratio", f"{m_bytes / ik_bytes:.2f}"] +
                      [f"{cells[k][0] / cells[k][1]:.2f}" for k in ("prefill", "decode", "depth")] + [""]))
    print(f"\nroofline: the best triad bench-model measured, {triad / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()

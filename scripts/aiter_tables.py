#!/usr/bin/python3
"""The AMD efficiency figures of docs/planning.md from AITER's tuned-kernel tables: the fused-MoE
tables' share of MI355X's bandwidth (every expert read, 256 and 512 tokens) and of its FP4 peak
(16,384 and 32,768 tokens), the DeepSeek-V3 FP8 GEMMs' share of its FP8 peak at M = 8,192, and
each MoE layer's time against the planner's: its experts' reads at the catalog's bandwidth plus
two grouped-GEMM kernels at its kernel_overhead_us.
    scripts/aiter_tables.py --aiter DIR [--binary build/mlaserve]   (DIR: a clone of ROCm/aiter)"""
import argparse
import csv
import json
import os
import statistics
import subprocess

MXFP4_BYTES = 4.25 / 8  # a code and an E8M0 scale per 32
MOE_TABLES = ["kimik3_a8w4_tuned_fmoe.csv", "kimik3_a4w4_tuned_fmoe.csv", "kimik2_fp4_tuned_fmoe.csv"]
TP8_WIDTH = {3584: 384, 7168: 256}  # K3's and K2's expert widths a rank at TP 8 (routed experts only: 896, 384)


def moe_rows(aiter, name):
    for row in csv.DictReader(open(os.path.join(aiter, "aiter/configs/model_configs", name))):
        dim, inter = int(row["model_dim"]), int(row["inter_dim"])
        if row["cu_num"] == "256" and TP8_WIDTH.get(dim) == inter and row["expert"] in ("384", "896"):
            experts, k, tokens = int(row["expert"]), int(row["topk"]), int(row["token"])
            touched = experts * (1 - (1 - k / experts) ** tokens)
            gb = touched * 3 * dim * inter * MXFP4_BYTES / 1e9
            yield tokens, gb, 2 * tokens * k * 3 * dim * inter, float(row["us"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiter", required=True)
    parser.add_argument("--binary", default="build/mlaserve")
    args = parser.parse_args()
    catalog = json.loads(subprocess.run([args.binary, "plan", "--dump-catalog"], check=True, capture_output=True,
                                        text=True).stdout)
    hw = next(entry for entry in catalog if entry["name"] == "mi355x")
    bandwidth = hw["bandwidth_gb_s"] * hw["bandwidth_efficiency"]
    bandwidth_shares, fp4_shares = [], []
    for name in MOE_TABLES:
        for tokens, gb, flops, us in moe_rows(args.aiter, name):
            if tokens in (256, 512):
                bandwidth_shares.append(gb / (us * 1e-6) / hw["bandwidth_gb_s"])
            if tokens in (16384, 32768) and "a8w4" not in name:
                fp4_shares.append(flops / (us * 1e-6) / (hw["fp4_tflops"] * 1e12))
            if tokens <= 1024:
                model_us = gb / bandwidth * 1e6 + 2 * hw["kernel_overhead_us"]
                print(f"{name} {tokens:5d} tokens: {us:7.1f} us, planner {model_us:7.1f} us ({us / model_us:.2f}x)")
    gemm = [float(row["tflops"]) / hw["fp8_tflops"]
            for row in csv.DictReader(open(os.path.join(
                args.aiter, "aiter/configs/model_configs/a8w8_blockscale_bpreshuffle_tuned_gemm_dsv3.csv")))
            if row["cu_num"] == "256" and row["M"] == "8192"]
    for label, shares in [("MoE share of bandwidth, 256-512 tokens", bandwidth_shares),
                          ("MXFP4 MoE share of the FP4 peak, 16k-32k tokens", fp4_shares),
                          ("DeepSeek-V3 FP8 GEMMs' share of the FP8 peak, M = 8,192", gemm)]:
        print(f"{label}: {min(shares):.3f}-{max(shares):.3f}, median {statistics.median(shares):.3f} ({len(shares)})")


if __name__ == "__main__":
    main()

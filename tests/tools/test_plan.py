"""mlaserve plan reproduces the seed deployment's published table from its inputs and
computes parameter counts from the real configs. Usage: test_plan.py MLASERVE WORK_DIR"""
import json
import os
import subprocess
import sys

failures, checks = [], 0


def plan(binary, *args):
    out = subprocess.run([binary, "plan", "--json", *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def check(label, value, want, rel):
    global checks
    checks += 1
    ok = abs(value - want) <= rel * abs(want)
    print(f"{'ok  ' if ok else 'FAIL'} {label}: {value:.4g} (want {want:.4g} within {rel:.0%})")
    if not ok:
        failures.append(label)


def check_true(label, condition):
    global checks
    checks += 1
    print(f"{'ok  ' if condition else 'FAIL'} {label}")
    if not condition:
        failures.append(label)


def main():
    binary, work = sys.argv[1], sys.argv[2]
    # Seed table: measured throughput and price -> tokens/s per dollar-hour.
    mi355x = plan(binary, "--model", "kimi-k3", "--hardware", "mi355x", "--devices", "8", "--measured-tok-s", "952", "--price", "2.5")
    b200 = plan(binary, "--model", "kimi-k3", "--hardware", "b200", "--devices", "16", "--measured-tok-s", "498", "--price", "4.25")
    b300 = plan(binary, "--model", "kimi-k3", "--hardware", "b300", "--devices", "8", "--measured-tok-s", "1568", "--price", "6")
    check("8xMI355X tok/s per $/h", mi355x["tok_s_per_dollar_hour"], 47.6, 0.005)
    check("16xB200 tok/s per $/h", b200["tok_s_per_dollar_hour"], 7.3, 0.01)
    check("8xB300 tok/s per $/h", b300["tok_s_per_dollar_hour"], 32.7, 0.005)
    check("MI355X node vs B200 node", mi355x["measured_tok_s_per_node"] / b200["measured_tok_s_per_node"], 3.8, 0.02)
    check("B300 vs MI355X", b300["measured_tok_s"] / mi355x["measured_tok_s"], 1.65, 0.01)
    # Fit verdicts for ~1.5 TB of weights.
    check_true("kimi-k3 does not fit 8 x 192 GB (b200)", not plan(binary, "--model", "kimi-k3", "--hardware", "b200")["fits"])
    check_true("kimi-k3 needs 2 nodes of b200", plan(binary, "--model", "kimi-k3", "--hardware", "b200")["nodes_needed"] == 2)
    check_true("kimi-k3 fits 8 x 288 GB (b300)", plan(binary, "--model", "kimi-k3", "--hardware", "b300")["fits"])
    check_true("kimi-k3 fits 8 x 288 GB (mi355x)", mi355x["fits"])
    check("kimi-k3 weight bytes ~1.45 TB (TiB-based, as the checkpoint lists it)", mi355x["weight_bytes"] / 2**40, 1.42, 0.02)
    # Parameter counts from the published configs.
    deepseek, k2 = plan(binary, "--model", "deepseek-v3"), plan(binary, "--model", "kimi-k2")
    check("DeepSeek-V3 total params", deepseek["total_params"], 671e9, 0.01)
    check("DeepSeek-V3 active params", deepseek["active_params"], 37e9, 0.02)
    check("Kimi K2 total params", k2["total_params"], 1.03e12, 0.01)
    check("Kimi K2 active params", k2["active_params"], 32e9, 0.02)
    check("Kimi K3 total params", mi355x["total_params"], 2.8e12, 0.02)
    check("Kimi K3 MLA latent bytes per token", mi355x["kv_bytes_per_token"], 27648, 0)
    check("Kimi K3 KDA recurrent state per sequence (MiB)", mi355x["kda_recurrent_state_bytes"] / 2**20, 414, 0.001)
    check_true("Kimi K3 at TP 8: 12 heads per rank, padded to 16",
               mi355x["head_padding"]["heads_per_rank"] == 12 and mi355x["head_padding"]["padded_heads"] == 16)
    # A config file written by make-model: the mini preset's published shape.
    mini = os.path.join(work, "mini-config")
    subprocess.run([binary, "make-model", "--preset", "mini", "--dtype", "bf16", "--override",
                    '{"num_hidden_layers": 1, "first_k_dense_replace": 1}', mini], check=True, capture_output=True)
    config = json.load(open(os.path.join(mini, "config.json")))
    config.update({"num_hidden_layers": 8, "first_k_dense_replace": 1})
    json.dump(config, open(os.path.join(work, "mini.json"), "w"))
    mini_plan = plan(binary, "--model", os.path.join(work, "mini.json"), "--hardware", "cpu-dev-2core", "--devices", "1")
    check("mini total params (455M)", mini_plan["total_params"], 455e6, 0.002)
    check("mini active params (103M)", mini_plan["active_params"], 103e6, 0.01)
    # Quantised configs written by make-model: the planner reads their native format.
    for preset, dtype, want in (("tiny", "int4", "int4:32"), ("tiny", "int8", "int8"), ("kimi-k3-tiny", "mxfp4", "mxfp4")):
        directory = os.path.join(work, f"{preset}-{dtype}")
        subprocess.run([binary, "make-model", "--preset", preset, "--dtype", dtype, directory], check=True,
                       capture_output=True)
        native = plan(binary, "--model", directory, "--hardware", "b200", "--devices", "1")["weights"]
        check_true(f"{preset} {dtype}: native weights read as {want} (got {native})", native == want)
    bad = subprocess.run([binary, "plan", "--model", "kimi-k3", "--hardware", "b200", "--tp", "7"], capture_output=True, text=True)
    check_true("a TP size that does not divide the heads is an error", bad.returncode == 1 and "do not divide" in bad.stderr)
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

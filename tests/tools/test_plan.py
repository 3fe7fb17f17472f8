"""mlaserve plan reproduces the seed deployment's published table from its inputs and computes
parameter counts from the real configs. Run by CTest through pytest (tests/conftest.py)."""
import json
import os
import subprocess

import pytest


def plan(binary, *args):
    out = subprocess.run([binary, "plan", "--json", *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def mi355x(binary):
    return plan(binary, "--model", "kimi-k3", "--hardware", "mi355x", "--devices", "8", "--measured-tok-s", "952",
                "--price", "2.5")


def test_seed_cost_table(binary, mi355x):
    """Measured throughput and price give the seed's tokens/s per dollar-hour."""
    b200 = plan(binary, "--model", "kimi-k3", "--hardware", "b200", "--devices", "16", "--measured-tok-s", "498",
                "--price", "4.25")
    b300 = plan(binary, "--model", "kimi-k3", "--hardware", "b300", "--devices", "8", "--measured-tok-s", "1568",
                "--price", "6")
    assert mi355x["tok_s_per_dollar_hour"] == pytest.approx(47.6, rel=0.005)
    assert b200["tok_s_per_dollar_hour"] == pytest.approx(7.3, rel=0.01)
    assert b300["tok_s_per_dollar_hour"] == pytest.approx(32.7, rel=0.005)
    assert mi355x["measured_tok_s_per_node"] / b200["measured_tok_s_per_node"] == pytest.approx(3.8, rel=0.02)
    assert b300["measured_tok_s"] / mi355x["measured_tok_s"] == pytest.approx(1.65, rel=0.01)


def test_kimi_k3_fit(binary, mi355x):
    """~1.45 TB of weights: two nodes of 192 GB cards, one of 288 GB."""
    b200 = plan(binary, "--model", "kimi-k3", "--hardware", "b200")
    assert not b200["fits"] and b200["nodes_needed"] == 2
    assert plan(binary, "--model", "kimi-k3", "--hardware", "b300")["fits"]
    assert mi355x["fits"]
    assert mi355x["weight_bytes"] / 2**40 == pytest.approx(1.42, rel=0.02)  # TiB, as the checkpoint lists it


def test_parameter_counts_from_published_configs(binary, mi355x):
    deepseek, k2 = plan(binary, "--model", "deepseek-v3"), plan(binary, "--model", "kimi-k2")
    assert deepseek["total_params"] == pytest.approx(671e9, rel=0.01)
    assert deepseek["active_params"] == pytest.approx(37e9, rel=0.02)
    assert k2["total_params"] == pytest.approx(1.03e12, rel=0.01)
    assert k2["active_params"] == pytest.approx(32e9, rel=0.02)
    assert mi355x["total_params"] == pytest.approx(2.8e12, rel=0.02)
    assert mi355x["kv_bytes_per_token"] == 27648  # Kimi K3's MLA latent bytes a token
    assert mi355x["kda_recurrent_state_bytes"] / 2**20 == pytest.approx(414, rel=0.001)
    assert mi355x["head_padding"]["heads_per_rank"] == 12 and mi355x["head_padding"]["padded_heads"] == 16


def test_a_config_make_model_wrote(binary, work_dir):
    """The mini preset's published shape, read from the config.json make-model writes."""
    mini = os.path.join(work_dir, "mini-config")
    subprocess.run([binary, "make-model", "--preset", "mini", "--dtype", "bf16", "--override",
                    '{"num_hidden_layers": 1, "first_k_dense_replace": 1}', mini], check=True, capture_output=True)
    config = json.load(open(os.path.join(mini, "config.json")))
    config.update({"num_hidden_layers": 8, "first_k_dense_replace": 1})
    json.dump(config, open(os.path.join(work_dir, "mini.json"), "w"))
    mini_plan = plan(binary, "--model", os.path.join(work_dir, "mini.json"), "--hardware", "cpu-dev-2core",
                     "--devices", "1")
    assert mini_plan["total_params"] == pytest.approx(455e6, rel=0.002)
    assert mini_plan["active_params"] == pytest.approx(103e6, rel=0.01)


@pytest.mark.parametrize("preset, dtype, want",
                         [("tiny", "int4", "int4:32"), ("tiny", "int8", "int8"), ("kimi-k3-tiny", "mxfp4", "mxfp4")])
def test_quantised_configs_read_in_their_native_format(binary, work_dir, preset, dtype, want):
    directory = os.path.join(work_dir, f"{preset}-{dtype}")
    subprocess.run([binary, "make-model", "--preset", preset, "--dtype", dtype, directory], check=True,
                   capture_output=True)
    assert plan(binary, "--model", directory, "--hardware", "b200", "--devices", "1")["weights"] == want


def test_a_tp_size_that_does_not_divide_the_heads_is_an_error(binary):
    bad = subprocess.run([binary, "plan", "--model", "kimi-k3", "--hardware", "b200", "--tp", "7"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "do not divide" in bad.stderr

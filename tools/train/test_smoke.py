"""CI's check of the trainer (it never retrains the committed models): 20 steps of the target on
a small slice of the corpus must lower the loss, and the checkpoint it writes, its FP8, INT4 and
MXFP4 exports, and a few steps of each draft must load (the target and dense draft in mlaserve;
the drafts and their acceptance in the trainer). Run by CTest through pytest
(tests/conftest.py)."""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable
# one thread: CTest runs other tests beside this one, and spinning threads starve each other
SMALL = ["--train-chars", "200000", "--batch", "4", "--length", "64", "--log-every", "1", "--threads", "1"]


def run(*args):
    return subprocess.run([PYTHON, *args], capture_output=True, text=True)


def assert_loads_in_mlaserve(binary, model):
    proc = subprocess.run([binary, "logits", "--model", model, "--ids", "1,2,3,4,5", "--out",
                           os.path.join(model, "l.npy")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-500:]


@pytest.fixture(scope="module")
def target(work_dir):
    """20 steps of the target; the loss must fall."""
    model = os.path.join(work_dir, "target")
    proc = run(os.path.join(HERE, "train_target.py"), "--out", model, "--steps", "20", *SMALL)
    assert proc.returncode == 0, proc.stderr[-500:]
    losses = [float(x) for x in re.findall(r"step \d+: loss ([0-9.]+)", proc.stdout)]
    assert len(losses) >= 20 and sum(losses[-5:]) < sum(losses[:5]) - 1.0, losses
    return model


@pytest.fixture(scope="module")
def drafts(target, work_dir):
    """A few steps of each draft kind: the MTP layer (written into the target), dense, DFlash."""
    written = {"mtp": target, "dense": os.path.join(work_dir, "dense"), "dflash": os.path.join(work_dir, "dflash")}
    for kind, out in written.items():
        proc = run(os.path.join(HERE, "train_drafts.py"), "--target", target, "--kind", kind, "--out", out, "--steps",
                   "3", *SMALL)
        assert proc.returncode == 0, f"{kind}: {proc.stderr[-500:]}"
    return written


def test_the_trained_checkpoint_loads(binary, target):
    assert_loads_in_mlaserve(binary, target)


@pytest.mark.parametrize("fmt", ["fp8", "int4", "mxfp4"])
def test_exports_load(binary, target, work_dir, fmt):
    out = os.path.join(work_dir, f"target-{fmt}")
    proc = run(os.path.join(HERE, "export.py"), "--format", fmt, target, out)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert_loads_in_mlaserve(binary, out)


def test_drafts_load_and_are_measured(binary, drafts):
    assert_loads_in_mlaserve(binary, drafts["mtp"])  # the target with its MTP layer
    assert_loads_in_mlaserve(binary, drafts["dense"])
    proc = run(os.path.join(HERE, "acceptance.py"), "--target", drafts["mtp"], "--dense", drafts["dense"], "--dflash",
               drafts["dflash"], "--prompts", "2", "--new-tokens", "8", "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-500:]
    assert len(re.findall(r"mean accepted length ([0-9.]+)", proc.stdout)) == 5, proc.stdout

"""CI's check of the trainer (it never retrains the committed models): 20 steps of the target on
a small slice of the corpus must lower the loss, and the checkpoint it writes, its FP8, INT4 and
MXFP4 exports, and a few steps of each draft must load (the target and dense draft in mlaserve;
the drafts and their acceptance in the trainer).
Usage: test_smoke.py MLASERVE WORK_DIR"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests"))
from checklist import check, finish  # noqa: E402

PYTHON = sys.executable


def run(*args):
    return subprocess.run([PYTHON, *args], capture_output=True, text=True)


def loads_in_mlaserve(binary, model, label):
    proc = subprocess.run([binary, "logits", "--model", model, "--ids", "1,2,3,4,5", "--out",
                           os.path.join(model, "l.npy")], capture_output=True, text=True)
    check(f"{label} loads in mlaserve", proc.returncode == 0, proc.stderr[-500:])


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    # one thread: CTest runs other tests beside this one, and spinning threads starve each other
    small = ["--train-chars", "200000", "--batch", "4", "--length", "64", "--log-every", "1", "--threads", "1"]
    model = os.path.join(work, "target")
    proc = run(os.path.join(HERE, "train_target.py"), "--out", model, "--steps", "20", *small)
    losses = [float(x) for x in re.findall(r"step \d+: loss ([0-9.]+)", proc.stdout)]
    check(f"20 steps lower the loss ({losses[0] if losses else '?'} -> {losses[-1] if losses else '?'})",
          proc.returncode == 0 and len(losses) >= 20 and sum(losses[-5:]) < sum(losses[:5]) - 1.0, proc.stderr[-500:])
    if proc.returncode != 0:
        finish()
    loads_in_mlaserve(binary, model, "the trained checkpoint")
    for fmt in ("fp8", "int4", "mxfp4"):
        out = os.path.join(work, f"target-{fmt}")
        proc = run(os.path.join(HERE, "export.py"), "--format", fmt, model, out)
        check(f"{fmt} export written", proc.returncode == 0, proc.stderr[-500:])
        loads_in_mlaserve(binary, out, f"the {fmt} export")
    drafts = {"mtp": model, "dense": os.path.join(work, "dense"), "dflash": os.path.join(work, "dflash")}
    for kind, out in drafts.items():
        proc = run(os.path.join(HERE, "train_drafts.py"), "--target", model, "--kind", kind, "--out", out, "--steps", "3",
                   *small)
        check(f"{kind} draft trains and is written", proc.returncode == 0, proc.stderr[-500:])
    loads_in_mlaserve(binary, model, "the target with its MTP layer")
    loads_in_mlaserve(binary, drafts["dense"], "the dense draft")
    proc = run(os.path.join(HERE, "acceptance.py"), "--target", model, "--dense", drafts["dense"], "--dflash",
               drafts["dflash"], "--prompts", "2", "--new-tokens", "8", "--threads", "1")
    lengths = re.findall(r"mean accepted length ([0-9.]+)", proc.stdout)
    check(f"acceptance of every draft measured ({len(lengths)} figures)", proc.returncode == 0 and len(lengths) == 5,
          proc.stdout + proc.stderr[-500:])
    finish()


if __name__ == "__main__":
    main()

"""mpirun -np 2: each process is one rank. Logits (TP and EP) match one rank, greedy
generation is identical, a mismatched world size and a rank that dies end the job with an
error instead of a hang. Usage: test_mpi.py MLASERVE WORK_DIR"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checklist import check, finish  # noqa: E402

os.environ.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                   "OMPI_MCA_rmaps_base_oversubscribe": "1"})


def mpirun(n, *args, timeout=300):
    return subprocess.run(["mpirun", "--oversubscribe", "-np", str(n), *args], capture_output=True, text=True, timeout=timeout)


def check_numa_bind(binary, model, ids, want, work):
    """--numa bind (what auto does on a machine with several nodes): one rank binds itself and
    gives the unbound logits bit for bit; two MPI processes that mpirun left unbound split the
    node's CPUs by local rank."""
    out = os.path.join(work, "numa.npy")
    proc = subprocess.run([binary, "logits", "--model", model, "--ids", ids, "--out", out, "--numa", "bind"],
                          capture_output=True, text=True)
    check("logits --numa bind: bound, the unbound logits bit for bit", proc.returncode == 0 and
          "this process: node" in proc.stderr and np.array_equal(np.load(out), want), proc.stderr[-300:])
    os.remove(out)
    proc = mpirun(2, "--bind-to", "none", binary, "logits", "--model", model, "--ids", ids, "--out", out, "--numa", "bind")
    placed = sorted(line.split("this process: ")[1] for line in proc.stderr.splitlines() if "this process: " in line)
    with open("/sys/devices/system/node/node0/cpulist") as f:  # e.g. "0-1" or "0,2"
        ranges = [part.split("-") for part in f.read().strip().split(",")]
    node0_cpus = sum(int(r[-1]) - int(r[0]) + 1 for r in ranges)
    # Two CPUs or more: one each; a one-CPU node binds both processes to it.
    ok = proc.returncode == 0 and len(placed) == 2 and (len(set(placed)) == 2 or node0_cpus < 2)
    error = np.abs(np.load(out) - want).max() / np.abs(want).max() if ok else 1.0
    check(f"mpirun -np 2 --numa bind: each process on its share of node 0 ({placed}), rel error {error:.1e}",
          ok and error <= 1e-5, proc.stderr[-300:])


def main():
    binary, work = sys.argv[1], sys.argv[2]
    if shutil.which("mpirun") is None:
        check("mpirun is installed", False, "scripts/install-deps.sh installs openmpi-bin")
        finish()
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "tiny-f32")
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([binary, "make-model", "--preset", "tiny", "--dtype", "f32", "--seed", "4", model], check=True,
                       capture_output=True)
    ids = ",".join(map(str, np.random.default_rng(1).integers(0, 32000, size=16)))
    single = os.path.join(work, "single.npy")
    subprocess.run([binary, "logits", "--model", model, "--ids", ids, "--out", single], check=True, capture_output=True)
    want = np.load(single).astype(np.float64)
    for label, flags in (("TP 2", []), ("EP 2", ["--ep"]), ("TP 2, decode path", ["--chunk", "1"])):
        out = os.path.join(work, "mpi.npy")
        if os.path.exists(out):
            os.remove(out)
        proc = mpirun(2, binary, "logits", "--model", model, "--ids", ids, "--out", out, *flags)
        ok = proc.returncode == 0 and os.path.exists(out)
        error = np.abs(np.load(out) - want).max() / np.abs(want).max() if ok else 1.0
        check(f"mpirun -np 2 logits, {label} (rel error {error:.1e})", ok and error <= 1e-5, proc.stderr[-300:])
    check_numa_bind(binary, model, ids, want, work)
    k3 = os.path.join(work, "kimi-k3-f32")
    if not os.path.exists(os.path.join(k3, "config.json")):
        subprocess.run([binary, "make-model", "--preset", "kimi-k3-tiny", "--dtype", "f32", "--seed", "4", k3], check=True,
                       capture_output=True)
    subprocess.run([binary, "logits", "--model", k3, "--ids", ids, "--out", single], check=True, capture_output=True)
    want_k3 = np.load(single).astype(np.float64)
    out = os.path.join(work, "mpi_k3.npy")
    proc = mpirun(2, binary, "logits", "--model", k3, "--ids", ids, "--out", out)
    ok = proc.returncode == 0 and os.path.exists(out)
    error = np.abs(np.load(out) - want_k3).max() / np.abs(want_k3).max() if ok else 1.0
    check(f"mpirun -np 2 logits, Kimi K3 (KDA + MLA heads split; rel error {error:.1e})", ok and error <= 1e-5,
          proc.stderr[-300:])
    prompt = "5,100,2000,7"
    alone = subprocess.run([binary, "generate", "--model", model, "--ids", prompt, "-n", "64", "--ignore-eos"],
                           capture_output=True, text=True)
    ranks = mpirun(2, binary, "generate", "--model", model, "--ids", prompt, "-n", "64", "--ignore-eos")
    check("mpirun -np 2 generate: 64 greedy tokens identical, printed once", ranks.returncode == 0 and
          ranks.stdout == alone.stdout and len(alone.stdout) > 0, f"{ranks.stdout[:80]!r} vs {alone.stdout[:80]!r}")
    models = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models")
    kjv = os.path.join(models, "kjv")
    kjv_prompt = "And God said, Let there be light: and there was light. And God said"
    plain = subprocess.run([binary, "generate", "--model", kjv, "--prompt", kjv_prompt, "-n", "256"], capture_output=True,
                           text=True)
    for drafter in ("ngram", "mtp", "draft:" + os.path.join(models, "kjv-draft"), "dflash:" + os.path.join(models, "kjv-dflash")):
        speculative = mpirun(2, binary, "generate", "--model", kjv, "--prompt", kjv_prompt, "-n", "256",
                             "--speculative", drafter, "--draft-policy", "fixed")
        accepted = re.search(r"(\d+) accepted", speculative.stderr)
        check(f"mpirun -np 2 generate on models/kjv with {drafter.split(':')[0]} speculative decoding: 256 tokens, "
              f"the text of one rank without ({accepted.group(1) if accepted else 0} drafts accepted)",
              speculative.returncode == 0 and speculative.stdout == plain.stdout and accepted and
              int(accepted.group(1)) > 0, speculative.stderr[-300:])
    bad = mpirun(3, binary, "logits", "--model", model, "--ids", "1,2", "--out", os.path.join(work, "x.npy"), "--tp", "2")
    check("mismatched world size is an error", bad.returncode != 0 and "does not match the MPI world size 3" in bad.stderr,
          bad.stderr[-300:])
    # A rank killed mid-run: the job must end with an error, not hang.
    job = subprocess.Popen(["mpirun", "--oversubscribe", "-np", "2", binary, "generate", "--model", model, "--ids", prompt,
                            "-n", "4000", "--ignore-eos"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    victims = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
    if victims:
        os.kill(int(victims[-1]), signal.SIGKILL)
    try:
        code = job.wait(90)
    except subprocess.TimeoutExpired:
        job.kill()
        code = None
    check("a rank that dies ends the job with an error", victims != [] and code not in (None, 0), f"exit {code}")
    finish()


if __name__ == "__main__":
    main()

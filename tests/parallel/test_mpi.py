"""mpirun -np 2: each process is one rank. Logits (TP and EP) match one rank, greedy
generation is identical, a mismatched world size and a rank that dies end the job with an
error instead of a hang. Run by CTest through pytest (tests/conftest.py)."""
import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

os.environ.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                   "OMPI_MCA_rmaps_base_oversubscribe": "1"})
IDS = ",".join(map(str, np.random.default_rng(1).integers(0, 32000, size=16)))
PROMPT = "5,100,2000,7"
MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models")


def mpirun(n, *args, timeout=300):
    return subprocess.run(["mpirun", "--oversubscribe", "-np", str(n), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module", autouse=True)
def mpirun_installed():
    assert shutil.which("mpirun"), "scripts/install-deps.sh installs openmpi-bin"


def made(binary, work_dir, name, preset):
    model = os.path.join(work_dir, name)
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([binary, "make-model", "--preset", preset, "--dtype", "f32", "--seed", "4", model], check=True,
                       capture_output=True)
    return model


def one_rank_logits(binary, model, out):
    subprocess.run([binary, "logits", "--model", model, "--ids", IDS, "--out", out], check=True, capture_output=True)
    return np.load(out).astype(np.float64)


@pytest.fixture(scope="module")
def tiny(binary, work_dir):
    return made(binary, work_dir, "tiny-f32", "tiny")


@pytest.fixture(scope="module")
def want(binary, work_dir, tiny):
    return one_rank_logits(binary, tiny, os.path.join(work_dir, "single.npy"))


def mpi_logits_error(binary, model, out, want, *flags):
    if os.path.exists(out):
        os.remove(out)
    proc = mpirun(2, binary, "logits", "--model", model, "--ids", IDS, "--out", out, *flags)
    assert proc.returncode == 0 and os.path.exists(out), proc.stderr[-300:]
    return np.abs(np.load(out) - want).max() / np.abs(want).max()


@pytest.mark.parametrize("flags", [[], ["--ep"], ["--chunk", "1"]], ids=["TP 2", "EP 2", "TP 2, decode path"])
def test_logits_match_one_rank(binary, work_dir, tiny, want, flags):
    assert mpi_logits_error(binary, tiny, os.path.join(work_dir, "mpi.npy"), want, *flags) <= 1e-5


def test_kimi_k3_logits_match_one_rank(binary, work_dir):
    """KDA and MLA heads split over the two processes."""
    k3 = made(binary, work_dir, "kimi-k3-f32", "kimi-k3-tiny")
    want_k3 = one_rank_logits(binary, k3, os.path.join(work_dir, "single-k3.npy"))
    assert mpi_logits_error(binary, k3, os.path.join(work_dir, "mpi_k3.npy"), want_k3) <= 1e-5


def test_numa_bind(binary, work_dir, tiny, want):
    """--numa bind (what auto does on a machine with several nodes): one rank binds itself and
    gives the unbound logits bit for bit; two MPI processes that mpirun left unbound split the
    node's CPUs by local rank."""
    out = os.path.join(work_dir, "numa.npy")
    proc = subprocess.run([binary, "logits", "--model", tiny, "--ids", IDS, "--out", out, "--numa", "bind"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "this process: node" in proc.stderr, proc.stderr[-300:]
    assert np.array_equal(np.load(out), want)
    os.remove(out)
    proc = mpirun(2, "--bind-to", "none", binary, "logits", "--model", tiny, "--ids", IDS, "--out", out, "--numa", "bind")
    placed = sorted(line.split("this process: ")[1] for line in proc.stderr.splitlines() if "this process: " in line)
    with open("/sys/devices/system/node/node0/cpulist") as f:  # e.g. "0-1" or "0,2"
        ranges = [part.split("-") for part in f.read().strip().split(",")]
    node0_cpus = sum(int(r[-1]) - int(r[0]) + 1 for r in ranges)
    # Two CPUs or more: one each; a one-CPU node binds both processes to it.
    assert proc.returncode == 0 and len(placed) == 2 and (len(set(placed)) == 2 or node0_cpus < 2), proc.stderr[-300:]
    assert np.abs(np.load(out) - want).max() / np.abs(want).max() <= 1e-5


def test_generation_is_identical_and_printed_once(binary, tiny):
    alone = subprocess.run([binary, "generate", "--model", tiny, "--ids", PROMPT, "-n", "64", "--ignore-eos"],
                           capture_output=True, text=True)
    ranks = mpirun(2, binary, "generate", "--model", tiny, "--ids", PROMPT, "-n", "64", "--ignore-eos")
    assert ranks.returncode == 0 and len(alone.stdout) > 0, ranks.stderr[-300:]
    assert ranks.stdout == alone.stdout


@pytest.mark.parametrize("drafter", ["ngram", "mtp", "draft:kjv-draft", "dflash:kjv-dflash"])
def test_speculative_decoding_gives_one_ranks_text(binary, drafter):
    kjv = os.path.join(MODELS, "kjv")
    prompt = "And God said, Let there be light: and there was light. And God said"
    plain = subprocess.run([binary, "generate", "--model", kjv, "--prompt", prompt, "-n", "256"], capture_output=True,
                           text=True)
    spec = drafter if ":" not in drafter else drafter.replace(":", ":" + MODELS + "/", 1)
    speculative = mpirun(2, binary, "generate", "--model", kjv, "--prompt", prompt, "-n", "256", "--speculative", spec,
                         "--draft-policy", "fixed")
    accepted = re.search(r"(\d+) accepted", speculative.stderr)
    assert speculative.returncode == 0 and speculative.stdout == plain.stdout, speculative.stderr[-300:]
    assert accepted and int(accepted.group(1)) > 0


def test_a_mismatched_world_size_is_an_error(binary, work_dir, tiny):
    bad = mpirun(3, binary, "logits", "--model", tiny, "--ids", "1,2", "--out", os.path.join(work_dir, "x.npy"), "--tp", "2")
    assert bad.returncode != 0 and "does not match the MPI world size 3" in bad.stderr, bad.stderr[-300:]


def test_a_rank_that_dies_ends_the_job_with_an_error(binary, tiny):
    job = subprocess.Popen(["mpirun", "--oversubscribe", "-np", "2", binary, "generate", "--model", tiny, "--ids", PROMPT,
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
    assert victims, "no rank to kill"
    assert code not in (None, 0), f"exit {code}"

"""`serve` on several ranks: --tp 2 as threads and `mpirun -np 2` (rank 0 serves HTTP, rank 1
follows its batches) answer concurrent greedy requests exactly as one rank does, and each MPI
rank's resident memory holds about its shard of the weights, not all of them. SIGTERM ends
every rank with exit 0. Usage: test_serve_ranks.py MLASERVE WORK_DIR"""
import os
import shutil
import subprocess
import sys
import signal
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "server"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from checklist import check, finish  # noqa: E402
from server_fixture import Server  # noqa: E402

os.environ.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                   "OMPI_MCA_rmaps_base_oversubscribe": "1"})
PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "Once upon a time", "def fibonacci(n):",
           "Latent attention caches", "Zebra"]


def completions(server):
    """Greedy completions of every prompt, sent concurrently (so batches mix sequences)."""
    results = {}

    def ask(prompt):
        status, body = server.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0,
                                                                  "ignore_eos": True})
        results[prompt] = body["choices"][0]["text"] if status == 200 else f"HTTP {status}: {body}"

    threads = [threading.Thread(target=ask, args=(p,)) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[p] for p in PROMPTS]


def ranks_of(mpirun_pid):
    """{rank: pid} of the mlaserve processes mpirun started."""
    ranks = {}
    for child in subprocess.run(["pgrep", "-P", str(mpirun_pid)], capture_output=True, text=True).stdout.split():
        with open(f"/proc/{child}/environ", "rb") as environ:
            variables = dict(v.split(b"=", 1) for v in environ.read().split(b"\0") if b"=" in v)
        if b"OMPI_COMM_WORLD_RANK" in variables:
            ranks[int(variables[b"OMPI_COMM_WORLD_RANK"])] = int(child)
    return ranks


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))


def stop_rank_zero(server):
    """SIGTERM to rank 0 (OpenMPI's mpirun treats a SIGTERM of its own as an abort); the exit
    code of mpirun, which is 0 only if every rank exited 0."""
    os.kill(ranks_of(server.proc.pid)[0], signal.SIGTERM)
    try:
        return server.proc.wait(60)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        return -1


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    tiny = os.path.join(work, "tiny")
    mini = os.path.join(work, "mini-bf16")
    for preset, directory in (("tiny", tiny), ("mini", mini)):
        if not os.path.exists(os.path.join(directory, "config.json")):
            subprocess.run([binary, "make-model", "--preset", preset, "--dtype", "bf16", "--seed", "5", directory],
                           check=True, capture_output=True)
    common = ("--kv-cache-gb", "0.05", "--max-num-seqs", "4", "--chunked-prefill-size", "32")
    server = Server(binary, tiny, *common)
    want = completions(server)
    check("one rank answers every prompt", all(not w.startswith("HTTP") for w in want), str(want))
    server.stop()

    server = Server(binary, tiny, *common, "--tp", "2")
    got = completions(server)
    check("serve --tp 2 (threads): completions identical to one rank", got == want, f"{got} vs {want}")
    check("serve --tp 2 exits 0 on SIGTERM", server.stop() == 0)

    if shutil.which("mpirun") is None:
        check("mpirun is installed (scripts/install-deps.sh installs openmpi-bin)", False)
    else:
        server = Server(binary, tiny, *common, launcher=("mpirun", "--oversubscribe", "-np", "2"))
        got = completions(server)
        check("mpirun -np 2 serve: completions identical to one rank", got == want, f"{got} vs {want}")
        code = stop_rank_zero(server)
        check("mpirun -np 2 serve: SIGTERM to rank 0 ends both ranks with exit 0", code == 0, f"exit {code}")

        # Resident memory per rank on the mini preset (0.9 GB of BF16 weights): after serving,
        # a rank has touched its shard only.
        alone = Server(binary, mini, *common)
        completions(alone)
        alone_rss = alone.rss_kib() / 1024
        alone.stop()
        ranks = Server(binary, mini, *common, launcher=("mpirun", "--oversubscribe", "-np", "2"))
        completions(ranks)
        rss = [rss_mib(pid) for pid in ranks_of(ranks.proc.pid).values()]
        stop_rank_zero(ranks)
        print(f"mini: one rank {alone_rss:.0f} MiB resident; 2 MPI ranks {', '.join(f'{r:.0f}' for r in rss)} MiB")
        check("mpirun -np 2 serve: each rank's RSS is at most 75% of one rank's",
              len(rss) == 2 and max(rss) <= 0.75 * alone_rss, f"{rss} vs {alone_rss:.0f}")
    finish()


if __name__ == "__main__":
    main()

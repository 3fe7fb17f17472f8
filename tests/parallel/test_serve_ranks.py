"""`serve` on several ranks: --tp 2 as threads and `mpirun -np 2` (rank 0 serves HTTP, rank 1
follows its batches) answer concurrent greedy requests exactly as one rank does, and each MPI
rank's resident memory holds about its shard of the weights, not all of them. SIGTERM ends
every rank with exit 0; a rank that stops answering or dies ends the job with a non-zero exit,
never a hang. Run by CTest through pytest (tests/conftest.py)."""
import http.client
import json
import os
import shutil
import subprocess
import sys
import signal
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "server"))
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


COMMON = ("--kv-cache-gb", "0.05", "--max-num-seqs", "4", "--chunked-prefill-size", "32")
MPIRUN = ("mpirun", "--oversubscribe", "-np", "2")


def model(binary, work_dir, preset):
    directory = os.path.join(work_dir, f"{preset}-bf16")
    if not os.path.exists(os.path.join(directory, "config.json")):
        subprocess.run([binary, "make-model", "--preset", preset, "--dtype", "bf16", "--seed", "5", directory],
                       check=True, capture_output=True)
    return directory


@pytest.fixture(scope="module")
def tiny(binary, work_dir):
    return model(binary, work_dir, "tiny")


@pytest.fixture(scope="module")
def one_rank(binary, tiny):
    """One rank's greedy completions of every prompt."""
    server = Server(binary, tiny, *COMMON)
    want = completions(server)
    server.stop()
    assert all(not w.startswith("HTTP") for w in want), want
    return want


def test_thread_ranks_answer_as_one_rank(binary, tiny, one_rank):
    server = Server(binary, tiny, *COMMON, "--tp", "2")
    got = completions(server)
    assert server.stop() == 0, "serve --tp 2 exits 0 on SIGTERM"
    assert got == one_rank


def test_mpi_ranks_answer_as_one_rank(binary, tiny, one_rank):
    assert shutil.which("mpirun"), "scripts/install-deps.sh installs openmpi-bin"
    server = Server(binary, tiny, *COMMON, launcher=MPIRUN)
    got = completions(server)
    code = stop_rank_zero(server)
    assert got == one_rank
    assert code == 0, "SIGTERM to rank 0 ends both ranks with exit 0"


def test_each_mpi_rank_holds_about_its_shard(binary, work_dir):
    """Resident memory per rank on the mini preset (0.9 GB of BF16 weights): after serving, a
    rank has touched its shard only."""
    assert shutil.which("mpirun"), "scripts/install-deps.sh installs openmpi-bin"
    mini = model(binary, work_dir, "mini")
    alone = Server(binary, mini, *COMMON)
    completions(alone)
    alone_rss = alone.rss_kib() / 1024
    alone.stop()
    ranks = Server(binary, mini, *COMMON, launcher=MPIRUN)
    completions(ranks)
    rss = [rss_mib(pid) for pid in ranks_of(ranks.proc.pid).values()]
    stop_rank_zero(ranks)
    assert len(rss) == 2 and max(rss) <= 0.75 * alone_rss, f"ranks {rss} MiB against one rank's {alone_rss:.0f}"


def stream_events(server, body):
    """The data: payloads of a streamed completion, read until the server ends the stream."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    events = []
    try:
        for line in response:
            if line.startswith(b"data: "):
                events.append(line[6:].decode().strip())
    except (http.client.IncompleteRead, ConnectionError):
        events.append("connection lost")
    return events


def signal_rank_one_while_streaming(server, signal_number):
    """Sends rank 1 the signal a second into a long stream; (the stream's events, the job's exit
    code or "a hang", seconds from the signal to the exit)."""
    events = []
    streaming = threading.Thread(target=lambda: events.extend(
        stream_events(server, {"prompt": "x", "max_tokens": 2000, "ignore_eos": True})))
    streaming.start()
    time.sleep(1)
    os.kill(ranks_of(server.proc.pid)[1], signal_number)
    sent = time.time()
    try:
        code = server.proc.wait(30)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        code = "a hang"
    seconds = time.time() - sent
    streaming.join(10)
    return events, code, seconds


def test_a_rank_that_stops_answering_fails_the_requests_and_ends_the_job(binary, tiny):
    """Rank 1 stopped (SIGSTOP: hung, as a partitioned node): rank 0's collective times out after
    --comm-timeout, every running request ends with an error event naming the cause, and the job
    exits non-zero, within seconds."""
    server = Server(binary, tiny, *COMMON, "--comm-timeout", "3", launcher=MPIRUN)
    events, code, seconds = signal_rank_one_while_streaming(server, signal.SIGSTOP)
    assert code not in (0, "a hang"), f"exit {code}"
    assert seconds < 15
    assert any("did not complete within 3 s" in event for event in events), events[-3:]
    assert events[-1] == "[DONE]", events[-3:]


def test_a_rank_that_dies_ends_the_job_without_a_hang(binary, tiny):
    """Rank 1 killed: OpenMPI's mpirun ends the job at once (rank 0 too, before any timeout), so
    the client's connection closes; the exit is non-zero and prompt."""
    server = Server(binary, tiny, *COMMON, launcher=MPIRUN)
    events, code, seconds = signal_rank_one_while_streaming(server, signal.SIGKILL)
    assert code not in (0, "a hang") and seconds < 10, f"exit {code}"
    assert events and events[-1] != "[DONE]", "the stream did not end normally"

#!/usr/bin/python3
"""Soak or overload a server: N client threads send mixed requests for M minutes — streamed
chat, whole completions, and streams abandoned after a few chunks; greedy and sampled — and
the run ends with the counts, the server's RSS drift and its cache state.

  scripts/soak.py --binary build/mlaserve --model DIR --minutes 30 --streams 16   # starts a server
  scripts/soak.py --base-url http://127.0.0.1:8000 --minutes 5 --streams 64      # a running one

With more streams than the server's --max-num-seqs plus --max-queue, requests past the queue are
refused with 429 and Retry-After: counted as refused (the client waits Retry-After, then sends
its next request), not as errors. Every other response must be
complete and well formed. Exit status 1 on any error, an RSS drift past --max-rss-drift (a
started server only), or requests or cache blocks still held once the clients stop."""
import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.parse

WORDS = ("the of and to in that he shall unto for his i a lord they be is him not them it with all thou "
         "thy was god which my me said but ye their have thee from as are when this out were by").split()


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.values = {"completed": 0, "abandoned": 0, "refused": 0, "errors": 0}
        self.error_samples = []

    def add(self, key, detail=None):
        with self.lock:
            self.values[key] += 1
            if detail and len(self.error_samples) < 10:
                self.error_samples.append(detail)


def drain(stream):
    for _ in stream:
        pass


def start_server(args):
    command = [args.binary, "serve", "--model", args.model, "--port", "0", *args.server_args.split()]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    for line in proc.stderr:
        sys.stderr.write(line)
        found = re.search(r"ready: serving .* on (http://[\d.]+:\d+)", line)
        if found:
            threading.Thread(target=drain, args=(proc.stderr,), daemon=True).start()
            return proc, found.group(1)
    raise SystemExit("the server did not start")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def metrics(host, port):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    values = {}
    for line in text.splitlines():
        found = re.match(r"(mlaserve_\w+)\{[^}]*\} (\S+)$", line)
        if found and found.group(1) not in values:
            values[found.group(1)] = float(found.group(2))
    return values


def request_body(rng, stream):
    prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 200)))
    body = {"max_tokens": rng.randint(8, 128), "stream": stream}
    if rng.random() < 0.5:
        body.update(temperature=0)
    else:
        body.update(temperature=0.8, top_p=0.95, seed=rng.randint(0, 1 << 30))
    if rng.random() < 0.5:
        body["messages"] = [{"role": "user", "content": prompt}]
        return "/v1/chat/completions", body
    body["prompt"] = prompt
    return "/v1/completions", body


def one_request(host, port, rng, counts, kind):
    path, body = request_body(rng, stream=kind != "whole")
    conn = http.client.HTTPConnection(host, port, timeout=600)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status in (429, 503):
            response.read()
            retry_after = response.getheader("Retry-After")
            if retry_after is None:
                return counts.add("errors", f"{response.status} without Retry-After")
            time.sleep(float(retry_after))  # as a well-behaved client waits before trying again
            return counts.add("refused")
        if response.status != 200:
            return counts.add("errors", f"{path}: HTTP {response.status} {response.read()[:200]!r}")
        if kind == "whole":
            reply = json.loads(response.read())
            tokens = reply["usage"]["completion_tokens"]
            good = reply["choices"][0]["finish_reason"] in ("stop", "length") and 0 < tokens <= body["max_tokens"]
            return counts.add("completed" if good else "errors", None if good else f"bad reply {str(reply)[:200]}")
        events = 0
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            events += 1
            if kind == "abandon" and events >= 3:
                return counts.add("abandoned")  # closing the connection cancels the request
            if line == "data: [DONE]":
                return counts.add("completed")
            if "error" in json.loads(line[6:]):
                return counts.add("errors", line[:200])
        counts.add("errors", f"stream ended without [DONE] after {events} events")
    except (OSError, http.client.HTTPException, ValueError, KeyError) as error:
        counts.add("errors", f"{path}: {type(error).__name__}: {error}")
    finally:
        conn.close()


def client(host, port, seed, deadline, counts):
    rng = random.Random(seed)
    while time.time() < deadline:
        kind = rng.choices(["stream", "whole", "abandon"], weights=[5, 3, 2])[0]
        one_request(host, port, rng, counts, kind)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", help="a running server (else --binary and --model start one)")
    parser.add_argument("--binary", default="build/mlaserve")
    parser.add_argument("--model", help="model directory for the started server")
    parser.add_argument("--server-args", default="--kv-cache-gb 0.5", help="more flags for the started server")
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--streams", type=int, default=16, help="concurrent client threads")
    parser.add_argument("--warmup-minutes", type=float, default=1, help="RSS is compared from after this")
    parser.add_argument("--max-rss-drift", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    proc = None
    base_url = args.base_url
    if base_url is None:
        if not args.model:
            parser.error("give --base-url, or --model (and --binary) to start a server")
        proc, base_url = start_server(args)
    url = urllib.parse.urlparse(base_url)
    counts = Counts()
    start = time.time()
    deadline = start + args.minutes * 60
    threads = [threading.Thread(target=client, args=(url.hostname, url.port, args.seed + i, deadline, counts))
               for i in range(args.streams)]
    for thread in threads:
        thread.start()
    rss_after_warmup = None
    while any(thread.is_alive() for thread in threads):
        time.sleep(5)
        if proc and rss_after_warmup is None and time.time() - start >= args.warmup_minutes * 60:
            rss_after_warmup = rss_kib(proc.pid)
        rss = f"  RSS {rss_kib(proc.pid) / 1024:.1f} MiB" if proc else ""
        print(f"{(time.time() - start) / 60:5.1f} min  {counts.values}{rss}", flush=True)
    idle = False
    for _ in range(100):  # abandoned requests are cancelled at the engine's next step
        m = metrics(url.hostname, url.port)
        idle = m["mlaserve_num_requests_running"] == 0 and m["mlaserve_num_requests_waiting"] == 0
        if idle and m["mlaserve_kv_cache_usage_perc"] == 0:
            break
        time.sleep(0.1)
    failed = counts.values["errors"] > 0 or not idle or m["mlaserve_kv_cache_usage_perc"] != 0
    print(f"{args.streams} streams for {args.minutes} min: {counts.values}")
    print(f"server after: running {m['mlaserve_num_requests_running']:.0f}, waiting {m['mlaserve_num_requests_waiting']:.0f}, "
          f"cache used {100 * m['mlaserve_kv_cache_usage_perc']:.2f} %, generated {m['mlaserve_generation_tokens_total']:.0f} "
          f"tokens, {m['mlaserve_num_preemptions_total']:.0f} preemptions")
    for sample in counts.error_samples:
        print("error:", sample)
    if proc:
        rss_end = rss_kib(proc.pid)
        if rss_after_warmup:
            drift = rss_end / rss_after_warmup - 1
            failed = failed or drift > args.max_rss_drift
            print(f"RSS: {rss_after_warmup / 1024:.1f} MiB after warm-up, {rss_end / 1024:.1f} MiB at the end ({100 * drift:+.2f} %)")
        proc.terminate()
        print("server exit status", proc.wait(60))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

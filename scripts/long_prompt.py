#!/usr/bin/python3
"""A long prompt through `mlaserve serve`: the time to its first token, then the same prompt
again (a prefix-cache hit), beside `bench-model`'s one-shot prefill of the same length.
    scripts/long_prompt.py --model DIR --tokens N [--binary build/mlaserve] [-- serve flags...]
The prompt is N random token ids in [100, min(vocab, 31000)), sent to /v1/completions with
max_tokens 1 (docs/performance.md, "Long prompts")."""
import argparse
import http.client
import json
import os
import random
import re
import subprocess
import time


def serve_ttft(binary, model, tokens, flags):
    server = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", *flags], stderr=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, text=True)
    port = None
    for line in server.stderr:
        if "warm-up:" in line:
            print(line.strip())
        found = re.search(r"ready: serving .* on http://127\.0\.0\.1:(\d+)", line)
        if found:
            port = int(found.group(1))
            break
    if port is None:
        raise SystemExit("the server did not start")
    vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
    rng = random.Random(1)
    prompt = [rng.randrange(100, min(vocab, 31000)) for _ in range(tokens)]
    try:
        for attempt in ("cold", "again"):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=24 * 3600)
            started = time.time()
            connection.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": 1}),
                               {"Content-Type": "application/json"})
            body = json.loads(connection.getresponse().read())
            seconds = time.time() - started
            if "usage" not in body:
                raise SystemExit(f"the request failed: {body}")
            cached = body["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
            print(f"serve, {attempt}: {tokens} tokens, first token after {seconds:.2f} s ({tokens / seconds:.1f} tok/s), "
                  f"{cached} cached")
    finally:
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="build/mlaserve")
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("serve_flags", nargs="*")
    args = parser.parse_args()
    serve_ttft(args.binary, args.model, args.tokens, args.serve_flags)
    out = subprocess.run([args.binary, "bench-model", "--model", args.model, "-p", str(args.tokens), "-n", "1", "--batch",
                          "1", "-r", "1"], capture_output=True, text=True, check=True).stdout
    print(next(line for line in out.splitlines() if line.startswith(f"| pp{args.tokens}")))


if __name__ == "__main__":
    main()

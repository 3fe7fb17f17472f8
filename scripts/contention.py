#!/usr/bin/python3
"""Decode speed when the machine is shared: bench-model's single-sequence decode, quiet and with
busy processes (`yes > /dev/null`, one per --busy) beside it, alternated for --rounds rounds, for
one or more binaries (before/after a change) and optionally ik_llama.cpp's llama-bench on a GGUF.
Prints the medians and each engine's busy speed as a share of its quiet speed.

  scripts/contention.py --model DIR [--binary build/mlaserve ...] [--rounds 5] [--busy 1]
                        [--generate 64] [--ik-bench PATH --gguf FILE] [-- extra bench-model flags]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def mlaserve_decode(binary, model, generate, extra):
    command = [binary, "bench-model", "--model", model, "-p", "64", "-n", str(generate), "-r", "3", "--batch", "1",
               "--json", *extra]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["decode_tok_s"]


def ik_decode(ik_bench, gguf, generate):
    threads = str(os.cpu_count())
    command = [ik_bench, "-m", gguf, "-p", "0", "-n", str(generate), "-t", threads, "-r", "3", "-mla", "3", "-fa", "1",
               "-fmoe", "1", "-rtr", "1", "-o", "json"]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]["avg_ts"]


def with_busy(count, measure):
    busy = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(count)]
    try:
        return measure()
    finally:
        for process in busy:
            process.kill()
            process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--binary", action="append", help="mlaserve binaries (default build/mlaserve)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--busy", type=int, default=1, help="busy processes beside the engine")
    parser.add_argument("--generate", type=int, default=64)
    parser.add_argument("--ik-bench", help="ik_llama.cpp's llama-bench")
    parser.add_argument("--gguf", help="the model as a GGUF, for --ik-bench")
    parser.add_argument("extra", nargs="*", help="flags for bench-model (after --)")
    args = parser.parse_args()
    engines = [(b, lambda b=b: mlaserve_decode(b, args.model, args.generate, args.extra))
               for b in (args.binary or ["build/mlaserve"])]
    if args.ik_bench:
        if not args.gguf:
            sys.exit("--ik-bench needs --gguf")
        engines.append(("ik_llama.cpp", lambda: ik_decode(args.ik_bench, args.gguf, args.generate)))
    quiet = {name: [] for name, _ in engines}
    busy = {name: [] for name, _ in engines}
    for r in range(args.rounds):
        for name, measure in engines:
            quiet[name].append(measure())
            busy[name].append(with_busy(args.busy, measure))
            print(f"round {r + 1}: {name}: quiet {quiet[name][-1]:.1f}, busy {busy[name][-1]:.1f} tok/s",
                  file=sys.stderr)
    print(f"decode tok/s, medians of {args.rounds} alternated rounds, {args.busy} busy process(es), "
          f"{os.cpu_count()} cores")
    print(f"| engine | quiet | busy | busy / quiet |\n|---|---|---|---|")
    for name, _ in engines:
        q, b = statistics.median(quiet[name]), statistics.median(busy[name])
        print(f"| {name} | {q:.1f} | {b:.1f} | {100 * b / q:.0f}% |")


if __name__ == "__main__":
    main()

"""Pass/fail bookkeeping shared by the script tests: check() prints and records one result,
finish() prints the tally and exits 1 if anything failed."""
import sys

failures = []
checks = 0


def check(label, ok, detail=""):
    global checks
    checks += 1
    print(f"{'ok  ' if ok else 'FAIL'} {label}" + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(label)


def finish():
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)

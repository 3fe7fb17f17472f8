"""The kernel builds one binary carries (src/kernels/isa.h): AVX-512 instructions only inside
the avx512 build, and MLASERVE_ISA choosing the build the start-up log names.

Run by CTest through pytest (tests/conftest.py); --binary is build/mlaserve.
"""
import collections
import os
import subprocess

import pytest

# Prefixes allowed before an EVEX-encoded instruction (segment overrides, address size); in
# 64-bit mode an instruction whose opcode byte is then 0x62 is EVEX, i.e. AVX-512.
ALLOWED_PREFIXES = {0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x67}


def evex_functions(binary):
    """{demangled function name: number of EVEX instructions} over the binary's code."""
    listing = subprocess.run(["objdump", "-d", "-C", "-w", "--insn-width=16", binary],
                             check=True, capture_output=True, text=True).stdout
    counts, function = collections.Counter(), None
    for line in listing.splitlines():
        if line.endswith(">:") and "<" in line:
            function = line[line.index("<") + 1:-2]
            continue
        fields = line.split("\t")
        if function is None or len(fields) < 3:
            continue
        try:
            code = [int(byte, 16) for byte in fields[1].split()]
        except ValueError:
            continue
        i = 0
        while i < len(code) and code[i] in ALLOWED_PREFIXES:
            i += 1
        if i < len(code) and code[i] == 0x62:
            counts[function] += 1
    return counts


def in_avx512_build(function):
    # The build's namespace (functions, their lambdas, templates of its types) and its table.
    return "avx512::" in function or "avx512_kernels" in function


def test_avx512_instructions_only_in_the_avx512_build(binary):
    """Where the avx512 build and the code above share an inline function or template, the
    linker keeps one copy: it must be one an AVX2 CPU runs, as must every static initialiser."""
    counts = evex_functions(binary)
    inside = [f for f in counts if in_avx512_build(f)]
    outside = sorted(f for f in counts if not in_avx512_build(f))
    assert len(inside) > 50, "the avx512 build's kernels should use AVX-512 (is the scan blind?)"
    assert not outside, f"AVX-512 instructions outside the avx512 build: {outside[:20]}"


def run_logits(binary, isa, work_dir):
    model = tiny_model(binary, work_dir)
    run = subprocess.run([binary, "logits", "--model", model, "--ids", "1,2,3", "--out",
                          os.path.join(work_dir, f"logits_{isa}.npy")],
                         capture_output=True, text=True, env=dict(os.environ, MLASERVE_ISA=isa))
    return run


def tiny_model(binary, work_dir):
    model = os.path.join(work_dir, "isa_model")
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([binary, "make-model", "--preset", "tiny", "--seed", "3", model],
                       check=True, capture_output=True)
    return model


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_mlaserve_isa_chooses_the_build_the_log_names(binary, work_dir, isa):
    run = run_logits(binary, isa, work_dir)
    if run.returncode != 0 and "this CPU cannot run that build" in run.stderr:
        pytest.skip(f"this CPU cannot run the {isa} build")
    assert run.returncode == 0, run.stderr
    assert f"kernels: {isa} build (" in run.stderr


def test_an_unknown_build_is_refused_by_name(binary, work_dir):
    run = run_logits(binary, "avx10", work_dir)
    assert run.returncode != 0
    assert "unknown kernel build 'avx10' (MLASERVE_ISA: avx2 or avx512)" in run.stderr

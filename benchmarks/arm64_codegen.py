"""The arm64 machine code of the emulator's hot integer kernels, made on any machine (issue 31
#3): are their inner loops NEON vector code, and with which multiply-adds (``sdot``/``udot``,
``smlal``, ``smull``)? CI is x86, so this is how arm64's code is checked there.

    python benchmarks/arm64_codegen.py [--x86-form]

How: numba lowers each kernel for the argument types the devices pass (found by calling the
emulator's own entry points on small int8 layers) with its optimisation off (NUMBA_OPT=0, a
cache directory of its own: numba's cache key does not hold the optimisation level), so the IR
is what numba hands LLVM before any x86 decision, the intrinsics of emu/conv/simd.py in the
form numba writes for arm64 (``simd.NEON_PAIRS``; ``--x86-form``: in x86's, to see what that
would give there); then LLVM's O3 pipeline, built as numba builds it
(``numba.core.codegen.create_pass_builder``: loop vectoriser on, SLP off, numba's defaults),
runs for each aarch64 target below, and the kernel's own function in the assembly is counted:
all instructions, those on vector registers, and the multiply-add family; then the same for its
busiest block (the most vector multiply-adds: the inner loop). The same pipeline for this
machine's CPU, on the x86 form, is the control (it shows what numba really emits here,
``vpmaddwd``/``vpdpwssd``). Two probes that are not project kernels show what LLVM does with
the plain int8 dot-product loop, summed in int32 and in numba's default int64.

Not covered: the code numba would make on an arm64 host differs only where the host's CPU name
and features differ from the targets named here; whether the code is fast there (no arm64
machine measured); the byte kernel (AVX-512 VNNI intrinsics: x86 only, never compiled there).
"""
from __future__ import annotations

import collections
import os
import re
import sys
import tempfile

from machine import bench_main

#: (name, LLVM triple, CPU, features): arm64 cores users have (Armv8.0 NEON only; Armv8.2 with
#: the dot product: Cortex-A76 laptops and boards, Neoverse N1 servers, Apple M1)
TARGETS = [("aarch64 generic (Armv8.0 NEON)", "aarch64-unknown-linux-gnu", "generic", ""),
           ("aarch64 cortex-a76 +dotprod", "aarch64-unknown-linux-gnu", "cortex-a76", "+dotprod"),
           ("aarch64 neoverse-n1 +dotprod", "aarch64-unknown-linux-gnu", "neoverse-n1",
            "+dotprod"),
           ("aarch64 apple-m1 +dotprod", "aarch64-unknown-linux-gnu", "apple-m1", "+dotprod")]

#: the multiply-add family counted (on vector registers only), per architecture
MULTIPLY_ADDS = {
    "aarch64": ("sdot", "udot", "usdot", "smmla", "smlal", "smlal2", "smull", "smull2", "mla",
                "mul", "addp", "uzp1", "uzp2", "sadalp", "saddw", "saddw2"),
    "x86_64": ("vpdpbusd", "vpdpwssd", "vpmaddwd", "vpmulld", "vpmullq", "vpaddd"),
}
#: the vector multiplies of a multiply-add, fused or not (smull, mul and vpmulld count: LLVM
#: pairs them with separate adds)
VECTOR_MACS = {"aarch64": ("sdot", "udot", "usdot", "smmla", "smlal", "smlal2", "smull",
                           "smull2", "mla", "mul"),
               "x86_64": ("vpdpbusd", "vpdpwssd", "vpmaddwd", "vpmulld")}
_VECTOR_OPERAND = {"aarch64": re.compile(r"\bv\d+\.\d*[bhsd]\b|\bq\d+\b"),
                   "x86_64": re.compile(r"%[xyz]mm\d+")}


def _probes():
    """Two int8 dot-product loops that are not project kernels: summed in int32 (each step
    cast back), and as numba types it by default (int32 * int32 is int64)."""
    import numpy as np

    from accelstub.emu.jit import njit

    @njit(nogil=True)
    def probe_dot_int32(a, b):
        s = np.int32(0)
        for i in range(a.shape[0]):
            s = np.int32(s + np.int32(np.int32(a[i]) * np.int32(b[i])))
        return s

    @njit(nogil=True)
    def probe_dot_default(a, b):
        s = np.int32(0)
        for i in range(a.shape[0]):
            s += np.int32(a[i]) * np.int32(b[i])
        return s

    return probe_dot_int32, probe_dot_default


def kernel_signatures() -> list[tuple]:
    """(Python function, argument types) of each hot kernel for the types the devices use:
    int8 activations read-only [C, H, W] (MAX78000, NE16, NVDLA) and channels-last with ``hwc``
    sums (Ethos-U85), int8 depthwise [H, W, C]; then the probes."""
    import numba
    import numpy as np

    from accelstub.emu.conv import int_conv as IC

    if numba.config.OPT != 0:
        raise RuntimeError("numba must be imported with NUMBA_OPT=0 (run this as a script)")
    rng = np.random.default_rng(0)
    v = rng.integers(-128, 128, (16, 12, 12), dtype=np.int8)
    w = IC.pack_weights(rng.integers(-128, 128, (8, 3, 3, 16)))
    IC.conv_sums(IC.read_only(v), w, (10, 10), kernel="int16")
    nhwc = np.ascontiguousarray(v.transpose(1, 2, 0)).transpose(2, 0, 1)
    IC.conv_sums(IC.read_only(nhwc), w, (12, 12), pad=(1, 1), hwc=True, kernel="int16")
    IC.depthwise_sums(rng.integers(-128, 128, (12, 12, 48), dtype=np.int8),
                      rng.integers(-128, 128, (48, 3, 3)), (10, 10))
    kernels = [IC._CONV_BLOCKS_TWIN.body, IC._PACK_INPUT_TWIN.body, IC._depthwise_pixels]
    a = np.ones(64, np.int8)
    for probe in _probes():
        probe(a, a)
        kernels.append(probe)
    return [(d.py_func, sig) for d in kernels for sig in d.signatures]


def kernel_ir(func, sig: tuple, arm64: bool) -> tuple[str, str]:
    """(numba's unoptimised LLVM IR module, the kernel function's symbol) of ``func`` for
    ``sig``, its simd intrinsics in arm64's form or x86's: compiled afresh (no disk cache), as
    :data:`simd.NEON_PAIRS` is read when a kernel compiles."""
    import numba

    from accelstub.emu.conv import simd

    kept = simd.NEON_PAIRS
    simd.NEON_PAIRS = arm64
    try:
        fresh = numba.njit(nogil=True)(func)
        fresh.compile(sig)
    finally:
        simd.NEON_PAIRS = kept
    return fresh.inspect_llvm(sig), fresh.overloads[sig].fndesc.mangled_name


def compile_asm(ir: str, triple: str, cpu: str, features: str) -> str:
    """``ir`` optimised by numba's O3 pipeline for (triple, cpu, features), as assembly."""
    import llvmlite.binding as llvm
    from numba.core import config
    from numba.core.codegen import create_pass_builder

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features,
                                                               opt=3, reloc="pic")
    mod = llvm.parse_assembly(ir)
    mod.triple = triple
    mod.data_layout = str(tm.target_data)
    pb = create_pass_builder(tm, opt=3, loop_vectorize=bool(config.LOOP_VECTORIZE),
                             slp_vectorize=bool(config.SLP_VECTORIZE))
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)


def function_blocks(asm: str, symbol: str) -> list[list[str]]:
    """The instruction lines of ``symbol``'s body in ``asm`` (from its label to the end of its
    function: the kernel alone, not the Python wrappers that inline it), per basic block."""
    lines = asm.splitlines()
    start = lines.index(f"{symbol}:")
    blocks: list[list[str]] = [[]]
    for line in lines[start + 1:]:
        if line.startswith(".Lfunc_end"):
            break
        if line.startswith(".LBB"):
            blocks.append([])
        elif line.startswith("\t") and not line.startswith("\t.") and line.split():
            blocks[-1].append(line.strip())
    return blocks


def instruction_mix(body: list[str], arch: str) -> dict[str, int]:
    """Counts: ``instructions``, ``vector`` (an operand is a vector register), ``vector MACs``
    (:data:`VECTOR_MACS` on vector registers) and each of :data:`MULTIPLY_ADDS` on vector
    registers."""
    vec = _VECTOR_OPERAND[arch]
    mix = collections.Counter(instructions=len(body))
    for line in body:
        op = line.split()[0]
        if vec.search(line):
            mix["vector"] += 1
            if op in MULTIPLY_ADDS[arch]:
                mix[op] += 1
            if op in VECTOR_MACS[arch]:
                mix["vector MACs"] += 1
    return dict(mix)


def format_mix(mix: dict[str, int], arch: str) -> str:
    """``420 instructions, 260 vector, 32 vector MACs: smull 32 addp 16`` (the multiply-add
    family in :data:`MULTIPLY_ADDS` order, those present)."""
    family = " ".join(f"{op} {mix[op]}" for op in MULTIPLY_ADDS[arch] if mix.get(op))
    return (f"{mix['instructions']} instructions, {mix.get('vector', 0)} vector, "
            f"{mix.get('vector MACs', 0)} vector MACs: {family or '-'}")


def report_line(kernel: str, target: str, asm: str, symbol: str, arch: str) -> str:
    """``kernel | target | function: <mix> | busiest block: <mix>``."""
    blocks = function_blocks(asm, symbol)
    mixes = [instruction_mix(b, arch) for b in blocks]
    whole = instruction_mix([i for b in blocks for i in b], arch)
    busiest = max(mixes, key=lambda m: (m.get("vector MACs", 0), m["instructions"]))
    return (f"{kernel} | {target} | function: {format_mix(whole, arch)} | busiest block: "
            f"{format_mix(busiest, arch)}")


def main() -> int:
    import llvmlite.binding as llvm

    x86_form = "--x86-form" in sys.argv[1:]
    host = ("this machine (control): " + llvm.get_host_cpu_name(), llvm.get_process_triple(),
            llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())
    arm_form = "x86" if x86_form else "arm64"
    print(f"LLVM {'.'.join(map(str, llvm.llvm_version_info))}: numba's IR at NUMBA_OPT=0 "
          f"(simd intrinsics in the {arm_form} form for the aarch64 targets, x86's for this "
          "machine), numba's O3 pipeline per target; counts of the kernel's own function")
    sigs = kernel_signatures()
    names = [f.__name__ for f, _ in sigs]
    for func, sig in sigs:
        kernel = func.__name__
        if names.count(kernel) > 1:
            kernel += f" {[str(t) for t in sig if 'array' in str(t)][0]}"
        forms = {False: kernel_ir(func, sig, False)}
        if not x86_form:
            forms[True] = kernel_ir(func, sig, True)
        for target, triple, cpu, features in [*TARGETS, host]:
            arch = "aarch64" if triple.startswith(("aarch64", "arm64")) else "x86_64"
            ir, symbol = forms[arch == "aarch64" and not x86_form]
            asm = compile_asm(ir, triple, cpu, features)
            print(report_line(kernel, target, asm, symbol, arch), flush=True)
    return 0


if __name__ == "__main__":
    # numba reads these when first imported, which bench_main's kernel line does
    os.environ["NUMBA_OPT"] = "0"
    with tempfile.TemporaryDirectory(prefix="accelstub-arm64-codegen-") as cache:
        os.environ["NUMBA_CACHE_DIR"] = cache
        code = bench_main(main, kernels_here=False)
    sys.exit(code)

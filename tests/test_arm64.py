"""arm64 (issue 31 #3), checked on the x86 CI machine: which convolution kernel an arm64 machine
gets and what its benchmarks print (the machine's inputs simulated), the arithmetic of the
int16-pair intrinsic in the form numba writes for arm64, and the aarch64 code LLVM makes of the
hot kernels (benchmarks/arm64_codegen.py: vectorised, with vector multiply-adds)."""
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest
from numba import config, njit

from accelstub.emu.conv import int_conv as IC
from accelstub.emu.conv import simd, vnni

from .helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]

#: what LLVM reports for a Neoverse N1 (the keys the project reads among them)
ARM64_FEATURES = {"neon": True, "fp-armv8": True, "dotprod": True, "crc": True, "sve": False,
                  "avx2": False}
#: an arm64 Linux's /proc/cpuinfo (Neoverse N1): no "model name", codes and "Features"
ARM64_CPUINFO = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm \
lrcpc dcpop asimddp ssbs
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
"""


@pytest.fixture
def arm64(monkeypatch, tmp_path):
    """This process seen as an arm64 Linux machine (Neoverse N1) by benchmarks/machine.py and
    emu/conv/vnni.py: platform, /proc/cpuinfo, LLVM's host CPU name and features."""
    machine = load_benchmark("machine")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(ARM64_CPUINFO)
    monkeypatch.setattr(machine, "CPUINFO", str(cpuinfo))
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(llvm, "get_host_cpu_name", lambda: "neoverse-n1")
    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: _Features(ARM64_FEATURES))
    monkeypatch.setattr(config, "CPU_NAME", None)
    return machine


class _Features(dict):
    """llvmlite's FeatureMap: a dict with ``flatten``."""

    def flatten(self) -> str:
        return ",".join(("+" if v else "-") + k for k, v in self.items())


def test_arm64_machine_line_names_the_core_and_neon_dot_product(arm64):
    line = arm64.machine_line()
    assert line.startswith("CPU: aarch64 implementer 0x41 part 0xd0c (neoverse-n1, ")
    assert "; vector extensions: NEON, NEON dot product; Python " in line


def test_arm64_extensions_come_from_cpuinfo_features_where_llvm_reports_none(arm64,
                                                                              monkeypatch):
    """Under qemu-user (and where LLVM cannot read the host) LLVM answers nothing."""
    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: _Features())
    assert arm64.vector_extensions() == ["NEON", "NEON dot product"]

    def unknown():
        raise RuntimeError("unknown host")
    monkeypatch.setattr(llvm, "get_host_cpu_features", unknown)
    assert arm64.vector_extensions() == ["NEON", "NEON dot product"]


def test_arm64_gets_the_int16_pair_kernel_and_its_benchmarks_say_so(arm64, monkeypatch):
    assert not vnni._vnni_available()  # the byte kernel is AVX-512 VNNI code
    monkeypatch.setattr(config, "CPU_NAME", "neoverse-n1")  # a portable cache's target
    monkeypatch.setattr(config, "CPU_FEATURES", "+neon,+dotprod,+fp-armv8")
    assert not vnni._vnni_available()
    monkeypatch.setattr(vnni, "HAVE_VNNI", False)
    monkeypatch.delenv("ACCELSTUB_VNNI", raising=False)
    assert arm64.kernel_choice() == ("conv kernel: int16 NEON smull (int16-pair kernel) for all "
                                     "(no AVX-512 VNNI on arm64; NEON dot product unused)")
    labels = arm64.kernel_labels()
    assert labels[("int_conv", "_conv_blocks")] == "int16 NEON smull (int16-pair kernel)"
    assert labels[("int_conv", "_depthwise_pixels")] == "depthwise loop"


def test_without_vnni_int8_layers_run_the_int16_pair_kernel_exactly(monkeypatch):
    """What conv_sums does on arm64 (HAVE_VNNI false there): weights packed without the byte
    layout, no byte launch, "auto" sums = the plain int64 sums; "int8" refused."""
    monkeypatch.setattr(IC, "HAVE_VNNI", False)
    rng = np.random.default_rng(31)
    v = rng.integers(-128, 128, (12, 9, 11), dtype=np.int8)
    w = rng.integers(-128, 128, (10, 3, 3, 12))
    packed = IC.pack_weights(w)
    assert packed.quads is None
    assert IC.byte_launch(v, packed, (7, 9), zero_point=0, in_hw=None, pad=(0, 0),
                          stride=(1, 1), dilation=(1, 1), hwc=False) is None
    out = IC.conv_sums(IC.read_only(v), packed, (7, 9))
    windows = np.lib.stride_tricks.sliding_window_view(v.astype(np.int64), (3, 3), axis=(1, 2))
    want = np.einsum("chwij,kijc->khw", windows, w)
    np.testing.assert_array_equal(out, want)
    with pytest.raises(ValueError, match="byte kernel does not apply"):
        IC.conv_sums(v, packed, (7, 9), kernel="int8")


def test_vmadd_in_arm64_form_sums_int16_pairs_exactly(monkeypatch):
    """simd.vmadd as numba writes it for arm64 (NEON_PAIRS), compiled and run here: each lane
    acc + x.lo * w.lo + x.hi * w.hi, wrapping modulo 2**32, lanes in order."""
    monkeypatch.setattr(simd, "NEON_PAIRS", True)

    @njit  # a fresh function (no disk cache): compiled now, in the arm64 form
    def madd(acc, x, w):
        out = np.empty(8, np.int32)
        simd.vstore(out, 0, simd.vmadd(simd.vload(acc, 0), simd.vload(x, 0), simd.vload(w, 0)))
        return out

    rng = np.random.default_rng(3)
    for trial in range(50):
        xs = rng.integers(-32768, 32768, 16).astype(np.int16)
        ws = rng.integers(-32767, 32768, 16).astype(np.int16)
        if trial == 0:  # the extremes: every product and pair sum at its largest
            xs[:], ws[:] = -32768, -32767
        acc = rng.integers(-2**31, 2**31, 8).astype(np.int32)
        got = madd(acc, xs.view(np.int32), ws.view(np.int32))
        prod = xs.astype(np.int64) * ws.astype(np.int64)
        want = (acc + prod[0::2] + prod[1::2] + 2**31) % 2**32 - 2**31
        np.testing.assert_array_equal(got, want.astype(np.int32))


def _codegen_lines() -> dict[tuple[str, str], str]:
    """benchmarks/arm64_codegen.py's report, (kernel, target) -> the rest of the line."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_OPT", "NUMBA_CACHE_DIR")}
    out = subprocess.run([sys.executable, "arm64_codegen.py"], cwd=ROOT / "benchmarks",
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    lines = {}
    for line in out.stdout.splitlines():
        parts = line.split(" | ")
        if len(parts) == 4:
            lines[parts[0], parts[1]] = " | ".join(parts[2:])
    return lines


def _count(text: str, what: str) -> int:
    """N of "N vector MACs"."""
    m = re.search(rf"(\d+) {what}\b", text)
    return int(m.group(1)) if m else 0


def _op(text: str, op: str) -> int:
    """N of "smull N" (0: not listed)."""
    m = re.search(rf"\b{op} (\d+)", text)
    return int(m.group(1)) if m else 0


@pytest.mark.slow
def test_hot_kernels_compile_to_neon_multiply_adds_on_aarch64():
    """The int16-pair kernel's inner loop makes 8 vmadd calls a turn, 128 int16 products into
    int32 lanes: on 128-bit NEON at least 32 vector multiplies (smull) with their pairwise adds
    (addp, the arm64 form), in one block; the depthwise kernel multiplies in vectors (mla);
    and the method sees dot products where LLVM makes them (the plain int8 probe: sdot with
    +dotprod, none on Armv8.0). On x86 with AVX2 the same pipeline gives numba's vpmaddwd."""
    lines = _codegen_lines()
    targets = {t for _, t in lines if t.startswith("aarch64")}
    assert len(targets) == 4
    for target in targets:
        whole, busiest = lines["_conv_blocks_tasks", target].split(" | ")
        assert _count(busiest, "vector MACs") >= 32, (target, busiest)
        assert _op(busiest, "smull") >= 32 and _op(busiest, "addp") >= 16, busiest
        assert "uzp1" not in busiest, busiest  # the x86 form's shuffles, which spilled
        assert _op(lines["_depthwise_pixels", target], "mla") > 0
        probe = lines["probe_dot_int32", target]
        assert (_op(probe, "sdot") > 0) == ("dotprod" in target), (target, probe)
    if llvm.get_host_cpu_features().get("avx2"):
        host = next(t for _, t in lines if t.startswith("this machine"))
        busiest = lines["_conv_blocks_tasks", host].split(" | ")[1]
        assert _op(busiest, "vpmaddwd") + _op(busiest, "vpdpwssd") >= 8, busiest

"""Import the NE16 test application that pulp-nnx's test generator writes (``testgen.py test
--headers``: ``gen/inc/layer_conf.h`` with the layer's defines, ``gen/src/{input,weight,scale,
bias,output}.c`` with the arrays and the golden output; ``conf.json`` beside them is optional)
as the host program its ``main()`` runs: the layer's arrays placed in L1, then the pulp-nnx
driver's steps for that configuration, then its check of the output against the golden one.

The register values are computed the way the driver's task code does (facts from pulp-nnx's
ne16/hal/ne16_task.c, src/pulp_nnx_ne16.c, ne16/bsp/ne16_pulp_bsp.c and util/hwpe.c, written
here in our own code): strides in bytes (input d0 = pixel, d1 = row; output d0 = 32-byte word, d1
= pixel, d2 = row; weights per mode), subtile counts and last sizes (ceil and ((n - 1) % size) +
1), REM2 = last output rows (+2 for 3x3) minus the bottom/right padding, PADDING and FILTER_MASK
packed top/right/bottom/left from bit 28/24/20/16 (mask: 24/16/8/0), INFEAT_PTR moved back to
the virtual padded origin, the weight offset -2^(bits-1) as an int32 with CONFIG0's layer-wise
flag, and for stride 2 the driver's re-tiling into one job per 2x2 output block with halved
output strides and per-tile padding. The driver's loops run as host steps that wait: ACQUIRE
until it returns an ID (both contexts busy: the device has to finish one), and the resolve loop
until RUNNING_JOB and STATUS say the last job is done.

Errors name the file and line (``layer_conf.h:12: ...``).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..c_source import strip_comments
from ..files import read_program_text
from ..host import Check, CheckResult, HostProgram, Step, Write
from .job import JOB_REGISTERS
from .model import BASE, JOB_BASE

CLUSTER_HWPE = 0x0020_0018
L1_BASE, L1_SIZE = 0x1000_0000, 128 << 10  # GAP9's cluster L1 (the device's default)
TRIGGER, ACQUIRE, STATUS, RUNNING_JOB, SOFT_CLEAR = (BASE + o for o in (0x0, 0x4, 0xC, 0x10, 0x14))
ARRAYS = ("input", "output", "weight", "scale", "bias")  # PI_L1 arrays, placed in this order
_CTYPES = {"uint8_t": "u1", "int8_t": "i1", "uint16_t": "<u2", "int16_t": "<i2",
           "uint32_t": "<u4", "int32_t": "<i4"}


class TestAppError(ValueError):
    """The test application cannot be imported; the message starts with ``file:line:``."""


#: largest generated source read (gen/inc/*.h, gen/src/*.c): the arrays of a layer that fits
#: the cluster's L1 written as C numbers (~5 characters per byte) are well under 16 MiB
MAX_SOURCE = 16 << 20
#: largest conf.json read (the generator's few dozen parameters)
MAX_CONF = 1 << 20


def _read(path: Path, limit: int = MAX_SOURCE) -> str:
    """A file of the test application: regular files only, at most ``limit`` bytes (checks
    below use exists(), so a FIFO or device in the tree is refused here, not skipped)."""
    return read_program_text(path, limit, "a file of a pulp-nnx test application")


def is_test_app(path: Path) -> bool:
    return path.is_dir() and any((path / d / "inc" / "layer_conf.h").exists()
                                 for d in ("gen", "."))


@dataclass
class Array:
    ctype: str
    values: np.ndarray | None  # None: declared without an initialiser (output)
    size: int
    where: str


def read_defines(path: Path) -> dict[str, object]:
    """``#define NAME (value)`` / ``"string"`` / bare flags of layer_conf.h."""
    out: dict[str, object] = {}
    for n, line in enumerate(strip_comments(_read(path)).splitlines(), 1):
        m = re.match(r"\s*#define\s+(\w+)\s*(.*?)\s*$", line)
        if not m or m.group(1).startswith("__"):
            continue
        name, value = m.groups()
        if not value:
            out[name] = True
        elif value.startswith('"'):
            out[name] = value.strip('"')
        else:
            try:
                out[name] = int(value.strip("()"), 0)
            except ValueError:
                raise TestAppError(f"{path.name}:{n}: #define {name}: {value} is not an "
                                   "integer") from None
    return out


def read_arrays(path: Path) -> dict[str, Array]:
    """The arrays a generated source defines: ``[section] ctype name[SIZE] [= {...}];``."""
    text = strip_comments(_read(path))
    sizes = {m.group(1): int(m.group(2)) for m in
             re.finditer(r"#define\s+(\w+)\s+\((\d+)\)", text)}
    out = {}
    for m in re.finditer(r"(?:PI_L[12]\s+)?(\w+)\s+(\w+)\[(\w+)\]\s*(=\s*\{(.*?)\})?\s*;", text,
                         flags=re.S):
        ctype, name, size_name, init, body = m.groups()
        line = text[:m.start()].count("\n") + 1
        where = f"{path.name}:{line}"
        if ctype not in _CTYPES:
            raise TestAppError(f"{where}: {name}: element type {ctype} is not one of "
                               f"{', '.join(_CTYPES)}")
        size = sizes.get(size_name, int(size_name) if size_name.isdigit() else None)
        if size is None:
            raise TestAppError(f"{where}: {name}: size {size_name} is not defined")
        values = None
        if init:
            try:
                values = np.array([int(v, 0) for v in body.replace("\n", " ").split(",")
                                   if v.strip()], np.int64)
            except ValueError as e:
                raise TestAppError(f"{where}: {name}: {e}") from None
            if values.size != size:
                raise TestAppError(f"{where}: {name} has {values.size} values, its size is "
                                   f"{size}")
        out[name] = Array(ctype, values, size, where)
    return out


def _tiles(n: int, size: int) -> int:
    return (n - 1) // size + 1


def _last(n: int, size: int) -> int:
    return (n - 1) % size + 1


def _half(hi: int, lo: int) -> int:
    return (hi & 0xFFFF) << 16 | (lo & 0xFFFF)


def driver_tasks(d: dict[str, object], addr: dict[str, int]) -> list[tuple[int, ...]]:
    """The 24 job register values the pulp-nnx driver programs for layer ``d`` (layer_conf.h)
    with the arrays at ``addr``: one job, or one per 2x2 output block for stride 2."""
    def g(name: str) -> int:
        return int(d[name])  # type: ignore[arg-type]

    k_h, dw, stride = g("WEIGHT_HEIGHT"), g("GROUPS") > 1, g("STRIDE_HEIGHT")
    in_bits, out_bits, w_bits = g("INPUT_BITS"), g("OUTPUT_BITS"), g("WEIGHT_BITS")
    h_in, w_in, k_in = g("INPUT_HEIGHT"), g("INPUT_WIDTH"), g("INPUT_CHANNEL")
    h_out, w_out, k_out = g("OUTPUT_HEIGHT"), g("OUTPUT_WIDTH"), g("OUTPUT_CHANNEL")
    pt, pb, pl, pr = g("PADDING_TOP"), g("PADDING_BOTTOM"), g("PADDING_LEFT"), g("PADDING_RIGHT")
    ko_size = 16 if dw else 32
    conf0 = (2 << 5 if k_h == 1 else (1 << 5 if dw else 0)) | (1 << 8 if stride == 2 else 0)
    conf0 |= {16: 1 << 21, 8: 0}.get(out_bits, 2 << 21) | (1 << 3 if in_bits == 16 else 0)
    conf0 |= w_bits - 1
    conf0 |= 1 << 15  # layer-wise weight offset
    d0u = 1 if in_bits == 16 else 2
    if d.get("HAS_NORM_QUANT"):
        conf0 |= 1 << 4 | (0 if d.get("HAS_RELU") else 1 << 23) | g("OUTSHIFT") << 16
        conf0 |= {8: 0, 16: 1 << 12, 32: 2 << 12}[g("SCALE_BITS")]
        conf0 |= (1 << 25) if d.get("HAS_BIAS") else 0
    w_in_stride = k_in * in_bits // 8
    h_in_stride = w_in * w_in_stride
    w_out_stride = k_out * out_bits // 8
    h_out_stride = w_out * w_out_stride
    n_ki = _tiles(k_in, 16)
    if k_h == 1:
        wst = (d0u * w_bits, d0u * w_bits * n_ki, 0)
    elif not dw:
        wst = (9 * d0u, 9 * d0u * w_bits * n_ki, 0)
    else:
        wst = (9 * d0u, 0, 0)

    def counters(ho: int, wo: int, pad_b: int, pad_r: int) -> tuple[int, ...]:
        rho, rwo = _last(ho, 3), _last(wo, 3)
        rhi = (rho if k_h == 1 else rho + 2) - pad_b
        rwi = (rwo if k_h == 1 else rwo + 2) - pad_r
        return (_half(_last(k_out, ko_size), _last(k_in, 16)), _half(rho, rwo), _half(rhi, rwi),
                _half(_tiles(k_out, ko_size), n_ki), _half(_tiles(ho, 3), _tiles(wo, 3)))

    def padding(top: int, bottom: int, left: int, right: int) -> int:
        return (top & 0xF) << 28 | (right & 0xF) << 24 | (bottom & 0xF) << 20 | (left & 0xF) << 16

    infeat = addr["input"] - (pt * w_in + pl) * w_in_stride  # the virtual padded origin
    norm = (addr.get("scale", 0), 0, addr.get("bias", 0) if d.get("HAS_BIAS") else 0) \
        if d.get("HAS_NORM_QUANT") else (0, 0, 0)
    offset = g("WEIGHT_OFFSET") & 0xFFFFFFFF
    if stride != 2:
        job = (addr["weight"], infeat, addr["output"], *norm,
               w_in_stride, h_in_stride, 0, 32, w_out_stride, h_out_stride, *wst,
               *counters(h_out, w_out, pb, pr), padding(pt, pb, pl, pr), offset, 0, conf0)
        return [job]
    # stride 2: output strides halved, one job per 2x2 output block (3x3 computed)
    o1, o2 = w_out_stride >> 1, h_out_stride >> 1
    cnt = counters(3 if h_out > 1 else 1, 3 if w_out > 1 else 1,
                   0 if h_in + pt >= 5 else pb, 0)
    pb2 = 0 if (h_in + pt - k_h) % 2 == 0 else pb
    pr2 = 0 if (w_in + pl - k_h) % 2 == 0 else pr
    full_pad = padding(pt, pb2, pl, pr2)
    n_h, n_w = _tiles(h_out, 2), _tiles(w_out, 2)
    in_h_off, in_w_off = (2 if h_out % 2 == 1 else 0), (2 if w_out % 2 == 1 else 0)
    out_h_off, out_w_off = (1 if h_out % 2 == 1 else 0), (1 if w_out % 2 == 1 else 0)
    jobs = []
    for i in range(n_h):
        for j in range(n_w):
            size = 3 + k_h - 1
            tile_in = infeat + (i * (size - (k_h - 2)) - (in_h_off if i else 0)) * h_in_stride \
                + (j * (size - (k_h - 2)) - (in_w_off if j else 0)) * w_in_stride
            tile_out = addr["output"] + (i * 2 - (out_h_off if i else 0)) * (o2 << 1) \
                + (j * 2 - (out_w_off if j else 0)) * (o1 << 1)
            pad = full_pad
            if i > 0:
                pad &= ~(0xF << 28)
            if j < n_w - 1:
                pad &= ~(0xF << 24)
            if i < n_h - 1:
                pad &= ~(0xF << 20)
            if j > 0:
                pad &= ~(0xF << 16)
            jobs.append((addr["weight"], tile_in & 0xFFFFFFFF, tile_out & 0xFFFFFFFF, *norm,
                         w_in_stride, h_in_stride, 0, 32, o1, o2, *wst, *cnt, pad, offset, 0,
                         conf0))
    return jobs


class Acquire(Step):
    """The driver's acquire loop (hwpe_task_queue_acquire_task; on failure it waits for an
    event): read ACQUIRE with the driver's read until it returns an ID (< 256)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def run(self, hp: HostProgram) -> bool:
        value = int.from_bytes(hp.device.host_read(ACQUIRE, 4), "little")
        if value >= 256:
            return False
        hp.vars["task_id"] = value
        return True

    def waiting_for(self, hp: HostProgram) -> str:
        return "ACQUIRE to return a job ID (both job contexts are busy)"


class NotFull(Step):
    """ne16_nnx_dispatch_wait: wait while STATUS says both contexts hold jobs (0x101)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def run(self, hp: HostProgram) -> bool:
        return int.from_bytes(hp.device.host_read(STATUS, 4), "little") != 0x101

    def waiting_for(self, hp: HostProgram) -> str:
        return "STATUS != 0x101 (a free job context)"


class Resolve(Step):
    """ne16_nnx_resolve_wait for the last task the driver acquired: done unless RUNNING_JOB is
    the ID before it, or is it while STATUS is not empty."""

    def __init__(self, where: str) -> None:
        self.where = where

    def run(self, hp: HostProgram) -> bool:
        task = int(hp.vars["task_id"])
        last = int.from_bytes(hp.device.host_read(RUNNING_JOB, 4), "little")
        empty = int.from_bytes(hp.device.host_read(STATUS, 4), "little") == 0
        return not (last == (task - 1) & 0xFF or (last == task and not empty))

    def waiting_for(self, hp: HostProgram) -> str:
        return f"job {hp.vars.get('task_id')} to finish (RUNNING_JOB and STATUS)"


def place_arrays(arrays: dict[str, Array], l1: tuple[int, int], where: str
                 ) -> tuple[list[Step], dict[str, int]]:
    """The writes putting the PI_L1 arrays into L1 (base, size) one after the other, word
    aligned, in :data:`ARRAYS` order, and each array's address; more than fits is an error."""
    base, size = l1
    steps: list[Step] = []
    addr: dict[str, int] = {}
    at = base
    for name in ARRAYS:
        a = arrays.get(name)
        if a is None:
            continue
        dt = np.dtype(_CTYPES[a.ctype])
        addr[name] = at
        data = (np.zeros(a.size, dt) if a.values is None
                else (a.values & ((1 << (8 * dt.itemsize)) - 1)).astype(dt.str.replace("i", "u")))
        steps.append(Write(at, data.tobytes(), where=f"{a.where} ({name}[] in L1)"))
        at += -(-a.size * dt.itemsize // 4) * 4
    if at > base + size:
        raise TestAppError(f"{where}: the layer's arrays take {at - base} bytes, more than the "
                           f"{size >> 10} KiB of L1")
    return steps, addr


def load_test_app(path: Path, l1: tuple[int, int] = (L1_BASE, L1_SIZE)) -> HostProgram:
    """The host program of the test application at ``path`` (the app directory holding gen/,
    or gen/ itself), its arrays placed in the L1 window ``l1`` (base, size). Raises
    TestAppError naming file:line."""
    gen = path / "gen" if (path / "gen" / "inc" / "layer_conf.h").exists() else path
    d = read_defines(gen / "inc" / "layer_conf.h")
    for key in ("INPUT_HEIGHT", "INPUT_WIDTH", "INPUT_CHANNEL", "OUTPUT_HEIGHT", "OUTPUT_WIDTH",
                "OUTPUT_CHANNEL", "OUTPUT_BITS", "INPUT_BITS", "WEIGHT_HEIGHT", "WEIGHT_BITS",
                "WEIGHT_OFFSET", "PADDING_TOP", "PADDING_BOTTOM", "PADDING_LEFT",
                "PADDING_RIGHT", "STRIDE_HEIGHT", "GROUPS"):
        if key not in d:
            raise TestAppError(f"layer_conf.h:1: {key} is not defined")
    conf = path / "conf.json"
    if conf.exists():
        _check_conf(conf, d)
    arrays: dict[str, Array] = {}
    for name in ARRAYS:
        src = gen / "src" / f"{name}.c"
        if name in ("scale", "bias") and not src.exists():
            continue
        if not src.exists():
            raise TestAppError(f"{gen.name}/src/{name}.c: missing")
        arrays.update(read_arrays(src))
    for name in ("input", "output", "weight", "golden_output"):
        if name not in arrays:
            raise TestAppError(f"{name}: not defined in {gen.name}/src")
    steps, addr = place_arrays(arrays, l1, f"{gen.name}/src")
    jobs = driver_tasks(d, addr)
    bsp = "pulp-nnx ne16_pulp_bsp.c"
    hw = CLUSTER_HWPE
    steps += [Write(hw, (0x800).to_bytes(4, "little"), "|=", f"{bsp}: clock enable"),
              Write(hw, (0x100).to_bytes(4, "little"), "|=", f"{bsp}: HCI priority"),
              Write(hw, (8).to_bytes(4, "little"), "|=", f"{bsp}: max stall 8"),
              Write(SOFT_CLEAR, bytes(4), where="pulp-nnx ne16_nnx_init: soft clear"),
              NotFull("pulp-nnx ne16_nnx_dispatch_wait")]
    for n, regs in enumerate(jobs):
        where = f"pulp-nnx ne16_nnx_dispatch (job {n} of {len(jobs)})"
        steps.append(Acquire(where))
        steps += [Write(JOB_BASE + 4 * i, v.to_bytes(4, "little"), where=f"{where}: {r}")
                  for i, (r, v) in enumerate(zip(JOB_REGISTERS, regs))]
        steps.append(Write(TRIGGER, bytes(4), where=f"{where}: TRIGGER"))
    steps += [Resolve("pulp-nnx ne16_nnx_resolve_wait"),
              Write(SOFT_CLEAR, bytes(4), where="pulp-nnx ne16_nnx_term: soft clear"),
              Write(hw, (~0xFF & 0xFFFFFFFF).to_bytes(4, "little"), "&=", f"{bsp}: reset stall"),
              Write(hw, (~0x100 & 0xFFFFFFFF).to_bytes(4, "little"), "&=", f"{bsp}: core prio"),
              Write(hw, (~0x800 & 0xFFFFFFFF).to_bytes(4, "little"), "&=", f"{bsp}: clock off")]
    out, golden = arrays["output"], arrays["golden_output"]
    dt = np.dtype(_CTYPES[out.ctype])
    steps.append(Check(lambda hp: _check(hp, addr["output"], dt, golden, d),
                       f"{golden.where}: check_output()"))
    name = str(d.get("TEST_NAME", path.name)).rstrip("/").split("/")[-1] or path.name
    summary = (f"{name}: pulp-nnx NE16 test, {d['INPUT_CHANNEL']}x{d['INPUT_HEIGHT']}x"
               f"{d['INPUT_WIDTH']} -> {d['OUTPUT_CHANNEL']}x{d['OUTPUT_HEIGHT']}x"
               f"{d['OUTPUT_WIDTH']}, {len(jobs)} job{'s' if len(jobs) > 1 else ''}, "
               f"{golden.size} expected outputs")
    return HostProgram(name, steps, summary=summary, total_units=len(jobs))


def _check(hp: HostProgram, base: int, dt: np.dtype, golden: Array, d: dict) -> CheckResult:
    """check_output(): every output element against the golden one; the first mismatch names
    its position, the job and the subtile that wrote it."""
    dev = hp.device
    got = np.frombuffer(dev.read(base, golden.size * dt.itemsize), dt).astype(np.int64)
    bad = np.flatnonzero(got != golden.values)
    if not bad.size:
        return CheckResult(True, f"PASS ({golden.size} outputs checked, {hp.units} jobs, "
                                 f"{hp.elapsed_ms():.0f} ms)")
    i = int(bad[0])
    w, k = int(d["OUTPUT_WIDTH"]), int(d["OUTPUT_CHANNEL"])
    y, x, c = i // (w * k), i // k % w, i % k
    a = base + i * dt.itemsize
    who = dev.locate(a) or "not written by any job"
    return CheckResult(False, f"FAIL at 0x{a:08x}: output[{i}] (row {y}, column {x}, channel "
                              f"{c}) expected {golden.values[i]}, got {got[i]} ({who}); "
                              f"{bad.size} of {golden.size} differ")


def _check_conf(path: Path, d: dict[str, object]) -> None:
    """conf.json and layer_conf.h describe the same layer."""
    text = _read(path, MAX_CONF)
    try:
        c = json.loads(text)
    except ValueError as e:
        raise TestAppError(f"{path.name}:{getattr(e, 'lineno', 1)}: {e}") from None
    pairs = (("in_height", "INPUT_HEIGHT"), ("in_width", "INPUT_WIDTH"),
             ("in_channel", "INPUT_CHANNEL"), ("out_channel", "OUTPUT_CHANNEL"))
    for key, define in pairs:
        if key in c and c[key] != d.get(define):
            raise TestAppError(f"{path.name}:1: {key} is {c[key]}, layer_conf.h says {define} "
                               f"{d.get(define)}")

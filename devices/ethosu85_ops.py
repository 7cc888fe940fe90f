"""Ethos-U85 kernel operations behind one small interface (the device calls nothing else).

``run_operation(cmd, state, mem, cfg)`` executes one kernel command (NPU_OP_CONV, _DEPTHWISE,
_POOL, _ELEMENTWISE, _RESIZE) against the NPU_SET_* state captured at issue (L6025) and returns
an :class:`OpResult` (exact MAC/element counts and the modelled cycles of the MAC and AO units).

Implemented here, with plain numpy integer arithmetic following the TRM pseudocode (seed 001,
digested in shared/devices/ethos-u85-command-stream.md; "Lnnnn" = seed line):

* NPU_OP_ELEMENTWISE add / sub / mul / min / max / abs (L8493-8648), NHWC or NHCWB16 tensors,
  broadcast and scalar operands, IFM/IFM2 input scaling, global OFM rescale, clamp.
* NPU_OP_POOL max / average (L8815-8993) with padding, strides, the built-in average-pool scale
  (L6961-6965) and global scaling.

Everything else raises :class:`NotImplementedYet` ("... not implemented yet"): the bit-exact
kernels (conv, depthwise, resize, LUT activations, weight and scale streams, chaining) come from
the emu/ethosu85_* modules and will be wired in here. A failed ``assert()`` of the pseudocode
(an UNPREDICTABLE programming) raises :class:`Unpredictable`; a memory access outside the system
memory windows raises :class:`NpuBusFault` from the memory port.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .errors import DeviceError
from .ethosu85_stream import Command

# ------------------------------------------------------------------------------------------------
# errors


class NotImplementedYet(DeviceError):
    """The emulator does not model this yet (no hardware state change)."""


class Unpredictable(DeviceError):
    """A pseudocode assert failed: the programming is UNPREDICTABLE (L6004-6014)."""


class NpuBusFault(DeviceError):
    """An NPU AXI access outside the system memory windows (STATUS.bus_status, L1267)."""

    def __init__(self, address: int, channel: int, region: int, message: str) -> None:
        self.address, self.channel, self.region = address, channel, region
        super().__init__(message)


def require(cond: bool, text: str, line: str) -> None:
    """The pseudocode's ``assert(cond)``; ``line`` cites the seed."""
    if not cond:
        raise Unpredictable(f"UNPREDICTABLE: assert({text}) fails ({line})")


def not_implemented(what: str) -> NotImplementedYet:
    return NotImplementedYet(f"{what} not implemented yet")


# AXI channels (pmu_axi_channel_t, L1283) used for STATUS.faulting_channel and PMU events
RD_CMD, RD_IFM, RD_WEIGHTS, RD_SCALE_BIAS, RD_MEM2MEM, RD_IFM_STREAM, RD_MEM2MEM_IDX = range(7)
WR_OFM, WR_MEM2MEM = 8, 9

PRECISION_BITS = (8, 16, 32, 64)  # activation_precision_t b8..b64 (L10026)

# ------------------------------------------------------------------------------------------------
# NPU_SET_* state


@dataclass
class SetState:
    """The NPU_SET_* state registers (L6016-6024): per mnemonic the last decoded command and the
    stream offset that wrote it. The registers have no reset value (Reset '-', e.g. L9342):
    using one that was never written is UNPREDICTABLE."""

    cmds: dict[str, Command] = field(default_factory=dict)

    def set(self, cmd: Command) -> None:
        self.cmds[cmd.name] = cmd

    def has(self, name: str) -> bool:
        return self._key(name) in self.cmds

    @staticmethod
    def _key(name: str) -> str:
        return name if name.startswith("NPU_SET_") else "NPU_SET_" + name

    def get(self, name: str, fld: str, default: int | None = None) -> int:
        """Field ``fld`` of NPU_SET_``name`` (stored integer: *_m1 as stored, enums as numbers)."""
        c = self.cmds.get(self._key(name))
        if c is None:
            if default is not None:
                return default
            raise Unpredictable(f"UNPREDICTABLE: {self._key(name)} is used but was never set "
                                f"(NPU_SET_* state has no reset value, L6024)")
        return c.fields[fld]

    def copy(self) -> "SetState":
        return SetState(dict(self.cmds))


# ------------------------------------------------------------------------------------------------
# configuration and results


@dataclass(frozen=True)
class NpuConfig:
    macs: int = 256  # MACs per cycle: 128 .. 2048

    @property
    def num_su(self) -> int:  # scaling units (L12830, L12886)
        return {128: 2, 256: 4, 512: 8, 1024: 16, 2048: 32}[self.macs]

    @property
    def ofm_data_w(self) -> int:  # AO_DMA_OFM_IF bits per cycle (Table 4-13 L12884-12892)
        return 256 if self.macs == 2048 else 128

    def depthwise_macs(self, ifm_bits: int) -> int:
        """MACs/cycle of DepthwiseConv2D (the tables of L12562-12790), used for pooling."""
        if ifm_bits == 8:
            return {128: 16, 256: 32, 512: 64, 1024: 128, 2048: 256}[self.macs]
        return {128: 8, 256: 16, 512: 16, 1024: 64, 2048: 128}[self.macs]


@dataclass
class OpResult:
    macs: int = 0  # multiply-accumulates (kernel positions x outputs), exact
    elements: int = 0  # OFM elements produced, exact
    mac_cycles: int = 0  # MODELLED cycles of the MAC unit
    ao_cycles: int = 0  # MODELLED cycles of the activation-output unit
    summary: str = ""


class MemoryPort(Protocol):
    """What an operation may touch: region-relative element gathers/scatters (the device adds
    BASEP[region], checks the system memory windows and records Touched ranges and PMU bytes)."""

    def gather(self, region: int, offsets: np.ndarray, size: int, signed: bool,
               channel: int) -> np.ndarray: ...

    def scatter(self, region: int, offsets: np.ndarray, size: int, values: np.ndarray,
                channel: int) -> None: ...

    def set_result_flag(self, value: int) -> None: ...


# ------------------------------------------------------------------------------------------------
# pseudocode primitives (L6149-6934), numpy int64 / Python-int exact


def sign_extend(v, n: int):
    """sign_extend(v, n) (L6201-6208) on ints or int64 arrays (n <= 64)."""
    if isinstance(v, np.ndarray):
        if n >= 64:
            return v.astype(np.int64)
        m = np.int64((1 << n) - 1)
        v = v.astype(np.int64) & m
        return np.where(v >= (1 << (n - 1)), v - (1 << n), v).astype(np.int64)
    v &= (1 << n) - 1
    return v - (1 << n) if v >= 1 << (n - 1) else v


def truncate(v: np.ndarray, n: int, signed: bool) -> np.ndarray:
    """truncate(v, n, type) (L6216-6223)."""
    if signed:
        return sign_extend(v, n)
    if n >= 64:
        return v.astype(np.int64)
    return v.astype(np.int64) & np.int64((1 << n) - 1)


def clz32(a: int) -> int:
    """clz(a, 32) (L7058-7064)."""
    a &= 0xFFFFFFFF
    return 32 - a.bit_length()


ROUND_OFM = ("double_symmetric", "natural", "double_asymmetric", "symmetric",
             "truncate_to_zero", "truncate_to_lower")  # round_mode_ofm_t (L12067)
ROUND_IFM = ("double_symmetric", "natural")  # round_mode_ifm_t (L11814)


def rounded_shift_right(acc: np.ndarray, shift: int, mode: str, dbl_rnd: int) -> np.ndarray:
    """rounded_shift_right (L6906-6934), exact for the unbounded-integer pseudocode: int64 where
    no intermediate can overflow (shift < 62), Python ints otherwise (digest gap G-R11)."""
    require(0 <= shift <= 63, "0 <= shift && shift <= 63", "L6911")
    require(0 <= dbl_rnd <= 30, "0 <= dbl_rnd && dbl_rnd <= 30", "L6912")
    if shift == 0:
        return acc
    big = shift >= 62 or (acc.size and int(np.max(np.abs(acc))) >= (1 << 62))
    a = acc.astype(object) if big else acc.astype(np.int64)
    r = 1 << (shift - 1)
    d = (1 << (30 - dbl_rnd)) if shift > 31 - dbl_rnd else 0
    pos = a >= 0
    if mode == "double_symmetric":
        R = np.where(pos, r + d, r - d)
    elif mode == "double_asymmetric":
        R = r + d
    elif mode == "truncate_to_zero":
        R = np.where(pos, 0, (1 << shift) - 1)
    elif mode == "truncate_to_lower":
        R = 0
    elif mode == "natural":
        R = r
    elif mode == "symmetric":
        R = np.where(pos, r, r - 1)
    else:
        raise Unpredictable(f"UNPREDICTABLE: reserved round mode {mode!r} (L12067)")
    if big:
        R = np.broadcast_to(np.asarray(R, dtype=object), a.shape)
        out = np.array([(int(x) + int(y)) >> shift for x, y in zip(a.ravel(), R.ravel())],
                       dtype=object).reshape(a.shape)
        return out
    return (a + R) >> shift


def as_int64(v: np.ndarray) -> np.ndarray:
    """Back to int64 after a rounding step (values are within int64 by then)."""
    if v.dtype == object:
        return np.array([int(x) for x in v.ravel()], dtype=np.int64).reshape(v.shape)
    return v.astype(np.int64)


# ------------------------------------------------------------------------------------------------
# tensors (L6448-6757)


@dataclass
class Tensor:
    """IFM, IFM2 or OFM as the NPU_SET_* state describes it."""

    name: str
    region: int
    bases: tuple[int, int, int, int]
    stride_x: int
    stride_y: int
    stride_c: int
    width0: int
    heights: tuple[int, int]
    bits: int
    signed: bool
    fmt: int  # 0 nhwc, 1 nhcwb16
    storage: int  # 0 tile2x2, 1 tile3x1, 2 chained, 3 none
    zero_point_raw: int

    @property
    def size(self) -> int:
        return self.bits // 8

    @property
    def type_text(self) -> str:
        return f"{'s' if self.signed else 'u'}{self.bits}"


def tensor(s: SetState, which: str) -> Tensor:
    """The IFM / IFM2 / OFM description from the state (the registers an access needs)."""
    p = f"{which}_PRECISION"
    bits = PRECISION_BITS[s.get(p, "activation_precision")]
    storage = s.get(p, "activation_storage")
    t = Tensor(which, 0, (0, 0, 0, 0), 0, 0, 0, 0, (0, 0), bits,
               bool(s.get(p, "activation_type")), s.get(p, "activation_format"), storage, 0)
    if storage in (2, 3):  # chained / none: no memory geometry needed
        return t
    t.region = s.get(f"{which}_REGION", "region")
    t.bases = tuple(s.get(f"{which}_BASE{i}", "addr", 0 if i else None) for i in range(4))
    t.stride_y = s.get(f"{which}_STRIDE_Y", "addr")
    if t.fmt == 0:
        t.stride_x = s.get(f"{which}_STRIDE_X", "addr")
    else:
        t.stride_c = s.get(f"{which}_STRIDE_C", "addr")
    t.width0 = s.get(f"{which}_WIDTH0_M1", "width_m1") + 1
    t.heights = (s.get(f"{which}_HEIGHT0_M1", "height_m1") + 1,
                 s.get(f"{which}_HEIGHT1_M1", "height_m1", 0) + 1)
    return t


def element_offsets(t: Tensor, y: np.ndarray, x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """element_address_in_region (L6448-6498), vectorised; region-relative byte offsets.
    NHWC adds ``c * element_size`` (digest gap G-A1: the literal ``+ c`` misaligns wide types)."""
    require(t.storage != 3, "storage != none", "L6462")
    y, x, c = (np.asarray(v, dtype=np.int64) for v in np.broadcast_arrays(y, x, c))
    tile = np.zeros(y.shape, dtype=np.int64)
    if t.storage == 0:  # tile2x2
        right = x >= t.width0
        x = np.where(right, x - t.width0, x)
        tile = np.where(right, 1, 0)
        h = np.where(right, t.heights[1], t.heights[0])
        low = y >= h
        y = np.where(low, y - h, y)
        tile = tile + np.where(low, 2, 0)
    elif t.storage == 1:  # tile3x1 (HEIGHT1 acts as an absolute row boundary, digest G-A2)
        t2 = y >= t.heights[1]
        t1 = ~t2 & (y >= t.heights[0])
        y = np.where(t2, y - t.heights[1], np.where(t1, y - t.heights[0], y))
        tile = np.where(t2, 2, np.where(t1, 1, 0))
    bases = np.array(t.bases, dtype=np.int64)[tile]
    es = t.size
    addr = bases + y * t.stride_y
    if t.fmt == 0:
        require(all(b % es == 0 for b in t.bases) and t.stride_x % es == 0
                and t.stride_y % es == 0, f"{t.name} base/stride_x/stride_y % element_size == 0",
                "L6487")
        return addr + x * t.stride_x + c * es
    require(all(b % 16 == 0 for b in t.bases) and t.stride_c % (16 * es) == 0
            and t.stride_y % (16 * es) == 0,
            f"{t.name} base % 16 == 0 && stride_c/stride_y % (16*element_size) == 0", "L6492")
    return addr + (c >> 4) * t.stride_c + (16 * x + (c & 15)) * es


def zero_point(t: Tensor, line: str) -> int:
    """The zero point read_ifm subtracts, with its asserts (L6550-6556)."""
    raw = t.zero_point_raw & 0xFFFF
    if not t.signed:
        require((t.bits == 8 and raw < 256) or (t.bits == 16 and raw == 32768) or raw == 0,
                f"{t.name} unsigned zero point {raw} valid for b{t.bits}", line)
        return raw
    zp = raw - 0x10000 if raw & 0x8000 else raw
    require((t.bits == 8 and -128 <= zp < 128) or zp == 0,
            f"{t.name} signed zero point {zp} valid for b{t.bits}", line)
    return zp


def read_tensor(mem: MemoryPort, s: SetState, t: Tensor, y, x, c, channel: int) -> np.ndarray:
    """read_ifm / read_ifm2 without upscale (L6508-6614): value - zero point."""
    if t.storage == 2:
        raise not_implemented("chaining (activation_storage chained)")
    t.zero_point_raw = s.get(f"{t.name}_ZERO_POINT", "zero_point")
    zp = zero_point(t, "L6550-6556")
    offs = element_offsets(t, y, x, c)
    v = mem.gather(t.region, offs.ravel(), t.size, t.signed, channel).reshape(offs.shape)
    return v - zp


def activation(s: SetState, acc: np.ndarray) -> np.ndarray:
    """activation() (L7075-7173) for lut_none and the tanh/sigmoid clamps; LUT modes are the
    kernels helper's."""
    p = PRECISION_BITS[s.get("OFM_PRECISION", "activation_precision")]
    if p == 64:
        return acc
    signed = bool(s.get("OFM_PRECISION", "activation_type"))
    zp_raw = s.get("OFM_ZERO_POINT", "zero_point") & 0xFFFF
    lo_raw = s.get("ACTIVATION_MIN", "clip_boundary") & 0xFFFF
    hi_raw = s.get("ACTIVATION_MAX", "clip_boundary") & 0xFFFF
    if signed:
        zp, lo, hi = (sign_extend(v, 16) for v in (zp_raw, lo_raw, hi_raw))
    else:
        zp, lo, hi = zp_raw, lo_raw, hi_raw
        require(zp < 256 or zp == 32768, "zp < 256 || zp == 32768", "L7090")
    a = sign_extend(acc.astype(np.int64) + zp, 32)  # truncation to 32 bit before the clamp
    fn = s.get("ACTIVATION", "activation_function")
    if fn == 10:
        a = np.clip(a, -0x10000, 0xFFFF)
    elif fn == 11:
        a = np.clip(a, -0x1F000, 0x1EFFF)
    elif s.get("ACTIVATION", "activation_clip_range") == 0:
        a = np.clip(a, lo, hi)
    if fn != 0:
        raise not_implemented(f"LUT activation (activation_function {fn})")
    return a


def write_ofm(mem: MemoryPort, s: SetState, y, x, c, value: np.ndarray, elementwise: bool) -> None:
    """write_ofm (L6618-6757) for HWC without reverse (the common case)."""
    t = tensor(s, "OFM")
    value = truncate(value, t.bits, t.signed)
    H = s.get("OFM_HEIGHT_M1", "height_m1") + 1
    W = s.get("OFM_WIDTH_M1", "width_m1") + 1
    D = s.get("OFM_DEPTH_M1", "depth_m1") + 1
    if H == W == D == 1:
        mem.set_result_flag(int(value.ravel()[0]) & 1)
    if t.storage == 2:
        raise not_implemented("chaining (OFM activation_storage chained)")
    if t.storage == 3:
        return
    rev = s.get("OFM_PRECISION", "activation_reverse")
    tr = s.get("OFM_PRECISION", "activation_transpose")
    if elementwise:
        require(tr in (0, 2, 6), "transpose in {HWC, HCW, CHW}", "L8513")
    if rev or tr:
        raise not_implemented("OFM reverse/transpose")
    offs = element_offsets(t, y, x, c)
    mem.scatter(t.region, offs.ravel(), t.size, value.ravel(), WR_OFM)


def ofm_shape(s: SetState) -> tuple[int, int, int]:
    return (s.get("OFM_HEIGHT_M1", "height_m1") + 1, s.get("OFM_WIDTH_M1", "width_m1") + 1,
            s.get("OFM_DEPTH_M1", "depth_m1") + 1)


def grid(H: int, W: int, D: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.meshgrid(np.arange(H), np.arange(W), np.arange(D), indexing="ij")


def rescale_global(s: SetState, acc: np.ndarray, shift_only: bool) -> np.ndarray:
    """rescale(acc, -1, normal|global|shift_only) with OFM_PRECISION.scale_mode global
    (L6944-7000)."""
    if s.get("OFM_PRECISION", "scale_mode") == 0:
        raise Unpredictable("UNPREDICTABLE: assert(mode == normal) fails: per-channel OFM scale "
                            "with an elementwise/global rescale (L6968, digest G-R9)")
    scale = s.get("OFM_SCALE", "scale")
    shift = s.get("OFM_SCALE", "shift")
    acc_format = s.get("ACC_FORMAT", "acc_format", -1)
    bits = 48 if acc_format == 1 else 32
    if acc_format >= 0:
        require(bool(np.all(acc == sign_extend(acc, bits))), f"acc == sign_extend(acc, {bits})",
                "L6980")
    if acc_format == 1:
        require(scale == sign_extend(scale, 16), "scale == sign_extend(scale, 16)", "L6982")
    result = acc if shift_only else acc.astype(np.int64) * scale
    mode = ROUND_OFM[s.get("OFM_SCALE", "round_mode")] if s.get("OFM_SCALE", "round_mode") < 6 \
        else "reserved"
    return as_int64(rounded_shift_right(result, shift, mode, s.get("OFM_SCALE", "dbl_rnd")))


# ------------------------------------------------------------------------------------------------
# performance model (MODELLED; digest ethos-u85-registers.md section 5)


def ao_cycles(cfg: NpuConfig, n: int, ofm_bits: int, in_bits: int, binary: bool,
              from_cb: bool) -> int:
    """AO cycles for ``n`` output elements: per scaling unit min(1, P, CB, DMA) elements/cycle
    (closed form of Tables 4-11/4-12, digest 5.2), NUM_SU units in parallel."""
    p = 0.5 if ofm_bits == 64 else 1.0
    cb = 0.5 if from_cb and in_bits == 32 and binary else 1.0
    dma = cfg.ofm_data_w / (cfg.num_su * ofm_bits)
    per_su = min(1.0, p, cb, dma)
    return int(np.ceil(n / (per_su * cfg.num_su))) if n else 0


# ------------------------------------------------------------------------------------------------
# NPU_OP_ELEMENTWISE (L8493-8648)

_UNARY = {5, 6, 7, 36}  # lrelu, abs, clz, not (L8499; Vela/Linux unary set)
_EW_IMPLEMENTED = {0: "mul", 1: "add", 2: "sub", 3: "min", 4: "max", 6: "abs"}


def _scale_in(s: SetState, which: str, a: np.ndarray, t: Tensor) -> np.ndarray:
    """scale_a / scale_b (L7008-7048): only b8 and signed b16 inputs are scaled."""
    if t.bits == 8 or (t.bits == 16 and t.signed):
        require(bool(np.all(a == sign_extend(a, 16))), "a == sign_extend(a, 16)", "L7013")
        sc = s.get(f"{which}_SCALE", "scale")
        return as_int64(rounded_shift_right(
            a.astype(np.int64) * sc, s.get(f"{which}_SCALE", "shift"),
            ROUND_IFM[s.get(f"{which}_SCALE", "round_mode")], s.get(f"{which}_SCALE", "dbl_rnd")))
    return a


def _operand(mem: MemoryPort, s: SetState, which: str, t: Tensor, oy, ox, oc) -> np.ndarray:
    bm = s.get(f"{which}_BROADCAST", "broadcast_mode")
    if bm == 8:  # scalar (L9538): the raw signed 32-bit OP_SCALAR, no zero point
        require(t.storage == 3, f"{which} storage == none for a scalar operand", "L9645")
        return np.full(oy.shape, s.get("OP_SCALAR", "scalar"), dtype=np.int64)
    require(bm <= 7, f"{which} broadcast_mode {bm} is not reserved", "L9538")
    iy = np.zeros_like(oy) if bm & 1 else oy
    ix = np.zeros_like(ox) if bm & 2 else ox
    ic = np.zeros_like(oc) if bm & 4 else oc
    return read_tensor(mem, s, t, iy, ix, ic, RD_IFM_STREAM)


def elementwise(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    mode = cmd.fields["elementwise_mode"]
    name = cmd.field_text().split("=", 1)[1]
    if mode not in _EW_IMPLEMENTED:
        raise not_implemented(f"NPU_OP_ELEMENTWISE {name}")
    unary = mode in _UNARY
    ifm = tensor(s, "IFM")
    ifm2 = tensor(s, "IFM2") if not unary else None
    if ifm2 is not None:  # digest G-R12: only checked when IFM2 is used
        require(ifm.bits == ifm2.bits and ifm.signed == ifm2.signed,
                "IFM precision == IFM2 precision", "L8497")
    require(ifm.bits in (8, 16) or (ifm.bits == 32 and ifm.signed),
            "IFM precision == b8 || b16 || (b32 && signed)", "L8509")
    require(s.get("OFM_PRECISION", "activation_reverse") == 0, "OFM reverse == none", "L8512")
    require(s.get("IFM_UPSCALE", "mode") == 0, "IFM_UPSCALE.mode == none", "L8514")
    H, W, D = ofm_shape(s)
    oy, ox, oc = grid(H, W, D)
    a = _operand(mem, s, "IFM", ifm, oy, ox, oc)
    if not unary:
        if s.get("IFM2_BROADCAST", "broadcast_mode") == 8:
            require(s.get("IFM_BROADCAST", "broadcast_mode") != 8,
                    "IFM_BROADCAST != scalar when IFM2 is scalar", "L8535")
        b = _operand(mem, s, "IFM2", ifm2, oy, ox, oc)
    shift_only = False
    if mode == 0:  # mul: unscaled inputs
        require(ifm.bits == 8 or ifm.signed or (
            s.get("IFM_ZERO_POINT", "zero_point") == 32768
            and s.get("IFM2_ZERO_POINT", "zero_point") == 32768),
            "b8 || signed || both zero points 32768", "L8556")
        acc = a * b
        shift_only = ifm.bits not in (8, 16)
    elif mode == 6:
        acc = np.abs(_scale_in(s, "IFM", a, ifm))
    else:
        sa = _scale_in(s, "IFM", a, ifm)
        sb = _scale_in(s, "IFM2", b, ifm2)
        acc = {1: lambda: sa + sb, 2: lambda: sa - sb, 3: lambda: np.minimum(sa, sb),
               4: lambda: np.maximum(sa, sb)}[mode]()
    acc = sign_extend(acc, 32)  # acc is int32 (L8524; wrap, digest G-R7)
    acc = rescale_global(s, acc, shift_only)
    acc = activation(s, acc)
    write_ofm(mem, s, oy, ox, oc, acc, elementwise=True)
    n = H * W * D
    ofm_bits = PRECISION_BITS[s.get("OFM_PRECISION", "activation_precision")]
    return OpResult(macs=0, elements=n, mac_cycles=0,
                    ao_cycles=ao_cycles(cfg, n, ofm_bits, ifm.bits, not unary, True))


# ------------------------------------------------------------------------------------------------
# NPU_OP_POOL (L8815-8993)

_POOL_IMPLEMENTED = {0: "max", 1: "average"}


def pool(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    mode = cmd.fields["pooling_mode"]
    name = cmd.field_text().split("=", 1)[1]
    if mode not in _POOL_IMPLEMENTED:
        raise not_implemented(f"NPU_OP_POOL {name}")
    H, W, D = ofm_shape(s)
    kh = s.get("KERNEL_HEIGHT_M1", "height_m1") + 1
    kw = s.get("KERNEL_WIDTH_M1", "width_m1") + 1
    ks = s.cmds.get("NPU_SET_KERNEL_STRIDE")
    if ks is None:
        s.get("KERNEL_STRIDE", "stride_x_lsb")  # raises: never set
    sy = 2 * ks.fields["stride_y_msb"] + ks.fields["stride_y_lsb"] + 1
    sx = 2 * ks.fields["stride_x_msb"] + ks.fields["stride_x_lsb"] + 1
    require(ks.fields["dilation_x"] == 0 and ks.fields["dilation_y"] == 0,
            "dilation_y == 1 && dilation_x == 1", "L8830")
    pt, pl = s.get("IFM_PAD_TOP", "pad"), s.get("IFM_PAD_LEFT", "pad")
    pb, pr = s.get("IFM_PAD_BOTTOM", "pad"), s.get("IFM_PAD_RIGHT", "pad")
    ifm_h = (H - 1) * sy + kh - (pt + pb)
    ifm_w = (W - 1) * sx + kw - (pl + pr)
    acc_input = s.get("ACC_FORMAT", "acc_input")
    if acc_input != 0:
        raise not_implemented("accumulator input keep/ifm2 (ACC_FORMAT.acc_input)")
    if s.get("ACC_FORMAT", "acc_output") != 0:
        raise not_implemented("accumulator output disable (ACC_FORMAT.acc_output)")
    require(ifm_h >= 1 and ifm_w >= 1, "ifm_height >= 1 && ifm_width >= 1", "L8850")
    ifm = tensor(s, "IFM")
    require(ifm.bits == 8 or (ifm.bits == 16 and ifm.signed) or (ifm.bits == 32 and ifm.signed),
            "IFM precision == b8 || (b16 && signed) || (b32 && signed)", "L8852")
    upscale = s.get("IFM_UPSCALE", "mode")
    if upscale != 0:
        raise not_implemented("IFM upscale")
    if mode == 0:
        require(kh * kw <= 65536 and (kh <= 256 or kw <= 256),
                "kh*kw <= 65536 && (kh <= 256 || kw <= 256)", "L8858")
    else:
        require(kh <= 8 and kw <= 8, "kh <= 8 && kw <= 8", "L8863")
        require(max(pt, pb) < kh and max(pl, pr) < kw, "pads < kernel", "L8865")
        require(ks.fields["decomposition"] == 0, "decomposition == d8x8", "L8866")
        require(ifm.bits != 32, "IFM precision != b32", "L8867")
    require(s.get("ACC_FORMAT", "acc_format") == 0, "acc_format == i32", "L8880")
    identity = -(1 << 31) if mode == 0 else 0
    # the IFM is fetched once (as the IFM DMA channel fills the input buffer, L787); the
    # windows are taken from a copy surrounded by the padding, whose value is the identity
    iy, ix, ic = grid(ifm_h, ifm_w, D)
    values = read_tensor(mem, s, ifm, iy, ix, ic, RD_IFM)
    padded = np.full((pt + ifm_h + pb, pl + ifm_w + pr, D), identity, dtype=np.int64)
    valid = np.zeros(padded.shape[:2], dtype=np.int64)
    padded[pt:pt + ifm_h, pl:pl + ifm_w] = values
    valid[pt:pt + ifm_h, pl:pl + ifm_w] = 1
    acc = np.full((H, W, D), identity, dtype=np.int64)
    count = np.zeros((H, W, 1), dtype=np.int64)
    ys, xs = np.arange(H) * sy, np.arange(W) * sx
    for ky in range(kh):
        for kx in range(kw):
            v = padded[(ys + ky)[:, None], (xs + kx)[None, :]]
            count += valid[(ys + ky)[:, None], (xs + kx)[None, :]][..., None]
            if mode == 0:
                acc = np.maximum(acc, v)
            else:
                acc = sign_extend(acc + v, 32)  # accumulate, i32 wrap (L6885-6896)
    count = np.broadcast_to(count, acc.shape)
    oy, ox, oc = grid(H, W, D)
    # write_accumulator (L6827-6854): bias 0 with a global scale (digest G-R1)
    if s.get("OFM_PRECISION", "scale_mode") == 0:
        raise not_implemented("per-channel scale/bias stream for NPU_OP_POOL")
    if mode == 1:
        out = np.empty_like(acc)
        rm = s.get("OFM_SCALE", "round_mode")
        require(rm < 6, "round_mode is not reserved", "L12067")
        for d in np.unique(count):
            d = int(d)
            k = 32 - clz32(d - 1)
            scale = ((((1 << 30) + 1) << k)) // d
            sel = count == d
            out[sel] = as_int64(rounded_shift_right(acc[sel] * scale, 30 + k, ROUND_OFM[rm],
                                                    s.get("OFM_SCALE", "dbl_rnd")))
        acc = out
    else:
        acc = rescale_global(s, acc, shift_only=False)
    acc = activation(s, acc)
    write_ofm(mem, s, oy, ox, oc, acc, elementwise=False)
    n = H * W * D
    macs = n * kh * kw
    ofm_bits = PRECISION_BITS[s.get("OFM_PRECISION", "activation_precision")]
    return OpResult(macs=macs, elements=n,
                    mac_cycles=-(-macs // cfg.depthwise_macs(ifm.bits)),
                    ao_cycles=ao_cycles(cfg, n, ofm_bits, 32, False, False))


# ------------------------------------------------------------------------------------------------
# the kernels helper's operations (emu/ethosu85_*): wired in when they land


def conv(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    raise not_implemented("NPU_OP_CONV (weight stream decoder and convolution kernel)")


def depthwise(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    raise not_implemented("NPU_OP_DEPTHWISE (weight stream decoder and depthwise kernel)")


def resize(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    raise not_implemented("NPU_OP_RESIZE")


OPERATIONS = {"NPU_OP_CONV": conv, "NPU_OP_DEPTHWISE": depthwise, "NPU_OP_POOL": pool,
              "NPU_OP_ELEMENTWISE": elementwise, "NPU_OP_RESIZE": resize}


def run_operation(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    """Execute kernel command ``cmd`` (one of :data:`OPERATIONS`)."""
    return OPERATIONS[cmd.name](cmd, s, mem, cfg)


# ------------------------------------------------------------------------------------------------
# one-line summaries for the program listing (no memory access)


def _shape(h: int, w: int, c: int) -> str:
    return f"{h}x{w}x{c}"


def summarize(cmd: Command, s: SetState) -> str:
    """``op, IFM/OFM shapes, kernel, activation`` from the state an operation would use; never
    raises (missing state shows as '?')."""
    def g(name, fld, default=None):
        try:
            return s.get(name, fld, default)
        except DeviceError:
            return None

    def ttype(which):
        p, t = g(f"{which}_PRECISION", "activation_precision"), g(f"{which}_PRECISION",
                                                                   "activation_type")
        return "?" if p is None else f"{'s' if t else 'u'}{PRECISION_BITS[p]}"

    op = cmd.name[len("NPU_OP_"):]
    text = f"{op} {cmd.field_text()}".rstrip()
    if cmd.name not in OPERATIONS:
        return text
    H, W, D = (g("OFM_HEIGHT_M1", "height_m1"), g("OFM_WIDTH_M1", "width_m1"),
               g("OFM_DEPTH_M1", "depth_m1"))
    ofm = "?" if None in (H, W, D) else _shape(H + 1, W + 1, D + 1)
    kh, kw = g("KERNEL_HEIGHT_M1", "height_m1"), g("KERNEL_WIDTH_M1", "width_m1")
    ks = s.cmds.get("NPU_SET_KERNEL_STRIDE")
    sy = sx = 1
    if ks is not None:
        sy = 2 * ks.fields["stride_y_msb"] + ks.fields["stride_y_lsb"] + 1
        sx = 2 * ks.fields["stride_x_msb"] + ks.fields["stride_x_lsb"] + 1
    pads = [g(f"IFM_PAD_{p}", "pad", 0) for p in ("TOP", "BOTTOM", "LEFT", "RIGHT")]
    parts = [text]
    if cmd.name == "NPU_OP_ELEMENTWISE":
        ifm = ofm
        if None not in (H, W, D):
            bm = g("IFM_BROADCAST", "broadcast_mode", 0)
            ifm = "scalar" if bm == 8 else _shape(1 if bm & 1 else H + 1, 1 if bm & 2 else W + 1,
                                                  1 if bm & 4 else D + 1)
        parts.append(f"ifm {ifm} {ttype('IFM')}")
        if cmd.fields["elementwise_mode"] not in _UNARY:
            bm2 = g("IFM2_BROADCAST", "broadcast_mode", 0)
            ifm2 = "scalar" if bm2 == 8 else ("?" if None in (H, W, D) else _shape(
                1 if bm2 & 1 else H + 1, 1 if bm2 & 2 else W + 1, 1 if bm2 & 4 else D + 1))
            parts.append(f"ifm2 {ifm2} {ttype('IFM2')}")
    elif cmd.name == "NPU_OP_RESIZE":
        ih = "?" if kh is None or kw is None else _shape(kh + 1, kw + 1, (D or 0) + 1)
        parts.append(f"ifm {ih} {ttype('IFM')}")
    else:
        ifm = "?"
        if None not in (H, W, D, kh, kw):
            ih = H * sy + kh + 1 - pads[0] - pads[1]  # (OH-1)*sy + KH - pad (L8168), *_M1 here
            iw = W * sx + kw + 1 - pads[2] - pads[3]
            idepth = g("IFM_DEPTH_M1", "depth_m1") if cmd.name == "NPU_OP_CONV" else D
            ifm = _shape(ih, iw, (idepth if idepth is not None else -1) + 1)
        parts.append(f"ifm {ifm} {ttype('IFM')}")
    parts.append(f"-> ofm {ofm} {ttype('OFM')}")
    if cmd.name != "NPU_OP_ELEMENTWISE":
        k = "?" if kh is None or kw is None else f"{kh + 1}x{kw + 1}"
        parts.append(f"kernel {k} stride {sy}x{sx}")
        if any(pads):
            parts.append("pad t{} b{} l{} r{}".format(*pads))
    fn = g("ACTIVATION", "activation_function")
    lo, hi = g("ACTIVATION_MIN", "clip_boundary"), g("ACTIVATION_MAX", "clip_boundary")
    if fn is not None:
        from .ethosu85_stream import E_ACT_FUNCTION

        act = E_ACT_FUNCTION.get(fn, str(fn))
        if lo is not None and hi is not None and g("ACTIVATION", "activation_clip_range") == 0:
            signed = g("OFM_PRECISION", "activation_type")
            lo, hi = (sign_extend(lo, 16), sign_extend(hi, 16)) if signed else (lo, hi)
            act += f" clip [{lo},{hi}]"
        parts.append(f"act {act}")
    return ", ".join(parts)

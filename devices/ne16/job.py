"""One NE16 job: its 24 registers decoded (:func:`decode`) and executed on the L1 memory
(:func:`execute`), subtile by subtile as the hardware orders them or all at once.

Semantics ("[NE16: ...]" names the register map's heading, docs/citations.md; "N§n" and
"N8#n" are project ids there; decisions in
docs/design-notes.md "NE16"):

* subtiles (N§3.2): Ko (32 output channels, 16 in depthwise) > Ho (3 rows) > Wo (3 columns)
  > Ki (16 input channels); SUBTILE_NB* count them, SUBTILE_REM* give the last one's size (0 also
  means full); each output subtile reads a 5x5 input window (3x3 in 1x1 mode) from INFEAT_PTR +
  row * D1 + column * D0 + channel;
* padding [NE16: PADDING]: the first Ho/Wo subtile's first TOP/LEFT window rows/columns, the last
  one's last BOTTOM/RIGHT ones counted from 5 [NE16: PADDING] and those at or past REM2's HI/WI read
  PADDING.VALUE instead of memory; FILTER_MASK disables filter rows/columns from each edge;
* weights (N§3.4): bit-serial, qw = CONFIG0.QWM1 + 1 bit-planes, byte (Ko, KiMaj, bit, tap,
  KiMin/8) at WEIGHTS_PTR + Ko*D1 + (KiMaj*qw + bit)*D0 + tap*2 (3x3; 1x1: + KiMaj*D0 + bit*2),
  bit c%8 of each byte for input channel c; effective weight = stored + the 9-bit signed
  {WEIGHT_OFFSET[31], WEIGHT_OFFSET[7:0]} when CONFIG0.WEIGHT_OFFS (symmetric: + 0);
* sums: 32-bit, wrapping (N§1.2), optionally starting from the 32-bit partial sums at OUTFEAT
  (STREAMIN, our choice of layout: the 32-bit output's);
* normalisation/quantisation (N§3.5, checked against pulp-nnx's functional model):
  acc * scale (64-bit), with NORM_BIAS the product wrapped to 32 bits plus the bias wrapped again,
  ReLU when QUANT_RECT = 0, arithmetic shift (RIGHT_SHIFT, or 6 bits of the per-channel shift),
  saturation to the 8/16/32-bit output (unsigned under ReLU); STREAMOUT = 0 writes the raw sums;
* output (N§3.1): channel k of pixel (y, x) at OUTFEAT_PTR + y*D2 + x*D1 + (k*bytes // 32)*D0
  + k*bytes % 32; STRIDED_2X2 writes positions (0,0), (0,2), (2,0), (2,2) of each output subtile.

Reserved and unmodelled encodings raise DeviceError naming the register and field before
anything changes.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...emu.conv import int_conv as IC
from ...emu.conv import ne16 as K
from ..bits import sign_extend
from ..content_cache import ContentCache, kept_for
from ..description import FieldView, load_description
from ..errors import DeviceError
from ..ranges import address_ranges

JOB_REGISTERS = ("WEIGHTS_PTR", "INFEAT_PTR", "OUTFEAT_PTR", "SCALE_PTR", "SCALE_SHIFT_PTR",
                 "SCALE_BIAS_PTR", "INFEAT_D0_STRIDE", "INFEAT_D1_STRIDE", "INFEAT_D2_STRIDE",
                 "OUTFEAT_D0_STRIDE", "OUTFEAT_D1_STRIDE", "OUTFEAT_D2_STRIDE",
                 "WEIGHTS_D0_STRIDE", "WEIGHTS_D1_STRIDE", "WEIGHTS_D2_STRIDE", "SUBTILE_REM0",
                 "SUBTILE_REM1", "SUBTILE_REM2", "SUBTILE_NB0", "SUBTILE_NB1", "PADDING",
                 # register i at 0x20 + 4*i [NE16: Overview]
                 "WEIGHT_OFFSET", "FILTER_MASK", "CONFIG0")
MODES = ("3x3", "3x3 depthwise", "1x1")
#: CONFIG0.norm_bits / quant_bits -> bytes of a scale / bits of an output [NE16: CONFIG0]
NORM_BYTES = (1, 2, 4)
QUANT_BITS = (8, 16, 32)
#: outputs from which a job's normalisation runs on numba's threads (emu/conv/ne16.py
#: normquant_parallel; int_conv.parallel_for_elements): measured on the AMD EPYC (Zen 4), a
#: 64-channel pass over sums just written by both threads, one thread -> two, medians: 8192
#: outputs 2.6 -> 3.3 us, 16384 4.0 -> 4.1, 32768 7.0 -> 5.5, 65536 12.9 -> 8.8 (AVX-512);
#: under the AVX2 approximation 3.7 -> 4.3, 6.4 -> 6.4, 11.5 -> 7.8, 21.9 -> 14.3. Smaller
#: jobs, the bundled demo's (8x8x40 outputs) among them, stay on one thread and compile no
#: parallel kernel
PARALLEL_ELEMENTS = 16384


#: the job registers with fields :func:`decode` reads (the others are whole pointers and strides)
FIELDED = JOB_REGISTERS[15:]


@functools.cache
def job_views() -> dict[str, type[FieldView]]:
    """The FieldView classes of :data:`FIELDED` as configs/ne16.toml describes them (issue 33
    #1: :func:`decode` reads every field by its name there)."""
    desc = load_description("ne16")
    return {name: desc.register(f"{name}_C0").definition.view for name in FIELDED}


@dataclass(frozen=True)
class JobConfig:
    regs: tuple[int, ...]  # the 24 values, in JOB_REGISTERS order
    mode: int              # 0 3x3, 1 3x3 depthwise, 2 1x1
    qw: int
    normquant: bool
    strided: bool
    norm_bytes: int
    streamin: bool
    w_offset: int
    right_shift: int
    out_bits: int
    relu: bool
    norm_shift: bool
    norm_bias: bool
    nb: tuple[int, int, int, int]    # Ko, Ho, Wo, Ki subtiles
    rem: tuple[int, int, int, int]   # last Ko, Ho, Wo, Ki subtile sizes
    rem_in: tuple[int, int]          # last Ho/Wo subtile: window rows/columns read (HI, WI)
    pad: tuple[int, int, int, int]   # top, bottom, left, right
    pad_value: int
    mask: tuple[int, int, int, int]  # filter rows/columns masked: top, bottom, left, right

    def reg(self, name: str) -> int:
        return self.regs[JOB_REGISTERS.index(name)]

    @property
    def ko_size(self) -> int:
        return 16 if self.mode == 1 else 32

    @property
    def win(self) -> int:
        return 3 if self.mode == 2 else 5

    @property
    def out_hw(self) -> tuple[int, int]:
        """Output rows and columns the job's subtiles cover."""
        return ((self.nb[1] - 1) * 3 + self.rem[1], (self.nb[2] - 1) * 3 + self.rem[2])

    @property
    def k_out(self) -> int:
        return (self.nb[0] - 1) * self.ko_size + self.rem[0]

    @property
    def k_in(self) -> int:
        return self.k_out if self.mode == 1 else (self.nb[3] - 1) * 16 + self.rem[3]

    @property
    def subtiles(self) -> int:
        return self.nb[0] * self.nb[1] * self.nb[2]

    def summary(self) -> str:
        """The listing's line (kept per configuration: every job writes it, ~6 us to build)."""
        return _summary(self)


@functools.lru_cache(maxsize=64)
def _summary(cfg: JobConfig) -> str:
    h, w = cfg.out_hw
    kind = MODES[cfg.mode] + (" stride 2" if cfg.strided else "")
    out = f"{'u' if cfg.relu else 'int'}{cfg.out_bits}" if cfg.normquant else "int32 sums"
    return (f"{kind}, {cfg.k_in} -> {cfg.k_out} channels, {h}x{w} output, {cfg.qw}-bit "
            f"weights, {out}, {cfg.subtiles} subtiles")


def decode(regs: tuple[int, ...], where: str = "") -> JobConfig:
    """The job's configuration; reserved or unmodelled encodings raise DeviceError naming the
    register field (N8#11, N8#19), after ``where``. Kept per register values: a layer's
    jobs repeat them, and the run and the listing both decode each job (issue 31 #2)."""
    try:
        return _decode(tuple(regs))
    except DeviceError as e:
        raise DeviceError(f"{where}{e}") from None


@functools.lru_cache(maxsize=64)
def _decode(regs: tuple[int, ...]) -> JobConfig:
    r = {name: view(v) for (name, view), v in zip(job_views().items(), regs[15:])}
    c0 = r["CONFIG0"]

    mode = c0.filter_mode
    if mode == 3:
        raise DeviceError("CONFIG0.filter_mode 3 is reserved [NE16: CONFIG0]")
    if c0.mode16:
        raise DeviceError("CONFIG0.mode16 (16-bit input activations, [NE16: CONFIG0]) is not "
                          "modelled yet")
    if c0.linear:
        raise DeviceError("CONFIG0.linear (linear mode, [NE16: CONFIG0]) is not modelled yet")
    if c0.norm_bits == 3:
        raise DeviceError("CONFIG0.norm_bits 3 is reserved [NE16: CONFIG0]")
    if c0.quant_bits == 3:
        raise DeviceError("CONFIG0.quant_bits 3 is reserved [NE16: CONFIG0]")
    normquant = bool(c0.streamout)
    out_bits = QUANT_BITS[c0.quant_bits]
    if not normquant and out_bits != 32:
        raise DeviceError(f"CONFIG0.streamout 0 writes 32-bit sums, but CONFIG0.quant_bits "
                          f"selects {out_bits}-bit output [NE16: CONFIG0]")
    ko_size = 16 if mode == 1 else 32
    win = 3 if mode == 2 else 5
    nb0, nb1 = r["SUBTILE_NB0"], r["SUBTILE_NB1"]
    nb = (nb0.ko, nb1.ho, nb1.wo, nb0.ki)
    for n, name in zip(nb, ("SUBTILE_NB0.ko", "SUBTILE_NB1.ho", "SUBTILE_NB1.wo",
                            "SUBTILE_NB0.ki")):
        if n == 0 and not (name.endswith("ki") and mode == 1):
            raise DeviceError(f"{name} is 0: a job has at least one subtile [NE16: Overview]")
    sizes = (ko_size, 3, 3, 16)
    rem0, rem1 = r["SUBTILE_REM0"], r["SUBTILE_REM1"]
    raw = (rem0.ko, rem1.ho, rem1.wo, rem0.ki)
    rem = tuple(v or full for v, full in zip(raw, sizes))  # 0 also means full (N8#4)
    for v, full, name in zip(rem, sizes, ("SUBTILE_REM0.ko", "SUBTILE_REM1.ho",
                                          "SUBTILE_REM1.wo", "SUBTILE_REM0.ki")):
        if v > full and not (name.endswith("ki") and mode == 1):
            raise DeviceError(f"{name} is {v}, more than a subtile's {full} [NE16: Overview]")
    rem2 = r["SUBTILE_REM2"]
    rem_in = (rem2.hi or win, rem2.wi or win)
    p = r["PADDING"]
    m = r["FILTER_MASK"]
    wo = r["WEIGHT_OFFSET"]
    # the 9-bit signed {WEIGHT_OFFSET.sign, WEIGHT_OFFSET.value} (N§3.4, N8#13)
    value_bits = wo.fields["value"].width
    w_offset = sign_extend(wo.sign << value_bits | wo.value, value_bits + 1) \
        if c0.weight_offs else 0
    return JobConfig(
        regs=tuple(regs), mode=mode, qw=c0.qwm1 + 1, normquant=normquant,
        strided=bool(c0.strided_2x2), norm_bytes=NORM_BYTES[c0.norm_bits],
        streamin=bool(c0.streamin), w_offset=w_offset, right_shift=c0.right_shift,
        out_bits=out_bits, relu=not c0.quant_rect, norm_shift=bool(c0.norm_shift),
        norm_bias=bool(c0.norm_bias), nb=nb, rem=rem, rem_in=rem_in,
        pad=(p.top, p.bottom, p.left, p.right),
        # 8-bit mode pads with VALUE[7:0] ([NE16: PADDING]; mode16 refused)
        pad_value=p.value & 0xFF,
        mask=(m.top, m.bottom, m.left, m.right))


# ------------------------------------------------------------------------------------------------
# execution

Reader = Callable[[int, int, str], np.ndarray]  # (address, bytes, what) -> uint8 array


@dataclass
class JobResult:
    """What a job writes: ``values`` uint8 [Ho, Wo, K, elem] (each element's little-endian
    bytes; None when the job was stored as it was computed: execute's ``l1``) at the byte
    ``addresses`` of each element (``elem`` bytes each), ``subtile`` (Ko, Ho, Wo index) of each
    element; and the address ranges it read."""

    values: np.ndarray | None
    addresses: np.ndarray
    subtile: np.ndarray
    written: np.ndarray  # bool [Ho, Wo, K]: positions the job writes (strided mode skips some)
    elem: int
    reads: list[tuple[int, int]]
    #: (OUTFEAT_PTR, D2, D1) when a pixel's channels are contiguous bytes (D0 = 32, or one
    #: word holds them all): the whole output is then one strided view of memory
    dense: tuple[int, int, int] | None = None
    #: written ranges per (first, last) subtile, shared by the jobs of one configuration
    range_cache: dict = field(default_factory=dict, repr=False, compare=False)
    #: [first, end) byte of the output when the whole job is one strided store (``dense`` and
    #: every element written), worked out once per configuration
    whole: tuple[int, int] | None = None

    def written_ranges(self, first: int, last: int) -> list[tuple[int, int]]:
        """The bytes subtiles first..last-1 write, as merged [start, end) ranges."""
        ranges = self.range_cache.get((first, last))
        if ranges is None:
            a = self.addresses[self.written & (self.subtile >= first) & (self.subtile < last)]
            ranges = self.range_cache[(first, last)] = address_ranges(a, self.elem)
        return list(ranges)


def _pad_flags(cfg: JobConfig, axis: int) -> np.ndarray:
    """[subtiles, window]: True where the window row (axis 0) / column (axis 1) is padding."""
    n, win = cfg.nb[1 + axis], cfg.win
    low, high = (cfg.pad[0], cfg.pad[1]) if axis == 0 else (cfg.pad[2], cfg.pad[3])
    flags = np.zeros((n, win), bool)
    flags[0, :low] = True
    flags[n - 1, max(win - high, 0):] = True
    flags[n - 1, cfg.rem_in[axis]:] = True
    return flags


def _row_flags(flags: np.ndarray) -> tuple[np.ndarray, bool]:
    """Per row of the job's virtual input: padding for every subtile whose window reads it, and
    whether all those subtiles agree on every row (the windows overlap by 2 rows; when they
    agree the job's input is one image with padding rows)."""
    n, win = flags.shape
    always = np.ones((n - 1) * 3 + win, bool)
    some = np.zeros_like(always)
    for s in range(n):
        always[s * 3:s * 3 + win] &= flags[s]
        some[s * 3:s * 3 + win] |= flags[s]
    return always, bool(np.array_equal(always, some))


def weights(cfg: JobConfig, read: Reader) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Effective weights [K, 3, 3, Ki] (1x1: [K, 1, 1, Ki]; depthwise: [K, 3, 3]) int16, masked
    taps 0, and the byte range read. Kept per exact weight bytes and configuration (a layer's
    jobs read the same weights again)."""
    base = cfg.reg("WEIGHTS_PTR")
    d0, d1 = cfg.reg("WEIGHTS_D0_STRIDE"), cfg.reg("WEIGHTS_D1_STRIDE")
    qw, taps = cfg.qw, (1 if cfg.mode == 2 else 9)
    if cfg.mode == 1:  # depthwise: one "output channel" of KiMaj blocks, Ki = Ko
        k_rows, kimaj = 1, -(-cfg.k_out // 16)
    else:
        k_rows, kimaj = cfg.k_out, cfg.nb[3]
    lo, hi, index = _weight_bytes(base, d0, d1, cfg.mode, qw, k_rows, kimaj, taps)
    key = (lo, hi, d0, d1, cfg.mode, qw, k_rows, kimaj, cfg.w_offset, cfg.mask, cfg.k_in,
           cfg.k_out)
    # kept while the bytes of [lo, hi) stay the same: no gather, no hash (issue 31 #2)
    w = _WEIGHTS.get(key, read(lo, hi - lo, "weights"),
                     lambda span: _effective(span[index], cfg, taps))
    return w, [(lo, hi)]


_WEIGHTS = ContentCache()


@functools.lru_cache(maxsize=64)
def _weight_bytes(base: int, d0: int, d1: int, mode: int, qw: int, k_rows: int, kimaj: int,
                  taps: int) -> tuple[int, int, np.ndarray]:
    """Every byte a job's weights occupy, as the strides give them: the range [lo, hi) and the
    offsets into it, shaped [k, kimaj, bit, tap, 2] (kept per configuration)."""
    k_i = np.arange(k_rows, dtype=np.int64)[:, None, None, None, None]
    m_i = np.arange(kimaj, dtype=np.int64)[None, :, None, None, None]
    b_i = np.arange(qw, dtype=np.int64)[None, None, :, None, None]
    t_i = np.arange(taps, dtype=np.int64)[None, None, None, :, None]
    j_i = np.arange(2, dtype=np.int64)[None, None, None, None, :]
    if mode == 2:
        addr = base + k_i * d1 + m_i * d0 + b_i * 2 + j_i + 0 * t_i
    else:
        addr = base + (0 if mode == 1 else k_i * d1) + (m_i * qw + b_i) * d0 + t_i * 2 + j_i
    lo, hi = int(addr.min()), int(addr.max()) + 1
    index = addr - lo
    index.flags.writeable = False
    return lo, hi, index


def _effective(raw: np.ndarray, cfg: JobConfig, taps: int) -> np.ndarray:
    """Stored qw-bit weights from the bit-planes (byte j of plane b: bit b of the 8 input
    channels 8j..8j+7, lowest in bit 0; N§3.4), plus the offset, masked taps zeroed."""
    k_rows, kimaj, qw = raw.shape[0], raw.shape[1], raw.shape[2]
    bits = np.unpackbits(raw[..., None], axis=-1, bitorder="little")  # [k, m, qw, taps, 2, 8]
    bits = bits.reshape(k_rows, kimaj, qw, taps, 16).transpose(0, 1, 4, 3, 2)
    stored = np.packbits(bits, axis=-1, bitorder="little")[..., 0]  # [k, m, 16, taps]
    eff = stored.reshape(k_rows, kimaj * 16, taps).astype(np.int16) + np.int16(cfg.w_offset)
    if taps == 9:
        t, b, left, r = cfg.mask
        off = [not (t <= ty < 3 - b and left <= tx < 3 - r) for ty in range(3) for tx in range(3)]
        eff[:, :, np.array(off)] = 0
    if cfg.mode == 1:
        w = eff[0, :cfg.k_out, :].reshape(cfg.k_out, 3, 3)
    else:
        kh = 3 if taps == 9 else 1
        w = eff[:, :cfg.k_in, :].transpose(0, 2, 1).reshape(cfg.k_out, kh, kh, cfg.k_in)
    w = np.ascontiguousarray(w)
    w.flags.writeable = False
    return w


def _rectangle(need: np.ndarray, d0: int, d1: int) -> tuple[int, int, int, int] | None:
    """(first row, end row, first column, end column) where the needed pixels form one
    rectangle and the strides are not negative (the usual case), else None."""
    if not need.any() or d0 < 0 or d1 < 0:
        return None
    rows, cols = np.flatnonzero(need.any(axis=1)), np.flatnonzero(need.any(axis=0))
    y0, y1, x0, x1 = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
    return (y0, y1, x0, x1) if need[y0:y1, x0:x1].all() else None


def _box(read: Reader, rect: tuple[int, int, int, int] | None, k_in: int, x_ptr: int, d0: int,
         d1: int) -> tuple[int, int, np.ndarray, tuple[int, int]] | None:
    """(first row, first column, the pixels [rows, columns, Ki] of the rectangle ``rect``
    (:func:`_rectangle`, kept per configuration) as a strided view of L1, the range read),
    or None without a rectangle."""
    if rect is None:
        return None
    y0, y1, x0, x1 = rect
    lo = x_ptr + y0 * d1 + x0 * d0
    hi = x_ptr + (y1 - 1) * d1 + (x1 - 1) * d0 + k_in
    view = np.ndarray((y1 - y0, x1 - x0, k_in), np.uint8, read(lo, hi - lo, "input features"),
                      0, (d1, d0, 1))
    view.flags.writeable = False
    return y0, x0, view, (lo, hi)


def _gather(read: Reader, need: np.ndarray, rect: tuple[int, int, int, int] | None,
            shape: tuple[int, int, int], x_ptr: int, d0: int, d1: int, pad_value: int
            ) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The job's input image [Y, X, Ki]: memory where ``need``, padding elsewhere. A rectangle
    of needed pixels (``rect``) is one strided view of L1 (the usual case); anything else
    element-wise."""
    img = np.full(shape, pad_value, np.uint8)
    if not need.any():
        return img, []
    k_in = shape[2]
    box = _box(read, rect, k_in, x_ptr, d0, d1)
    if box is not None:
        y0, x0, view, span = box
        img[y0:y0 + view.shape[0], x0:x0 + view.shape[1]] = view
        return img, [span]
    yy = np.arange(shape[0], dtype=np.int64)[:, None, None]
    xx = np.arange(shape[1], dtype=np.int64)[None, :, None]
    addr = (x_ptr + yy * d1 + xx * d0 + np.arange(k_in, dtype=np.int64))[need]
    lo, hi = int(addr.min()), int(addr.max()) + 1
    img[need] = read(lo, hi - lo, "input features")[addr - lo]
    return img, [(lo, hi)]


@dataclass(frozen=True)
class _Geometry:
    """What a job's registers alone decide: padding flags, the output elements' addresses,
    subtiles and which are written. Kept per configuration (a layer's jobs repeat)."""

    rows_pad: np.ndarray
    cols_pad: np.ndarray
    need: np.ndarray
    rect: tuple[int, int, int, int] | None  # _rectangle of need
    agree: bool
    addresses: np.ndarray
    in32: np.ndarray  # the 32-bit layout's addresses (streamin)
    subtile: np.ndarray
    written: np.ndarray
    dense: tuple[int, int, int] | None
    whole: tuple[int, int] | None  # JobResult.whole
    ranges: dict = field(default_factory=dict, repr=False, compare=False)  # JobResult's cache
    #: id(weights) -> (the weights, conv_sums' ``launches`` for them: kept_for)
    launches: dict = field(default_factory=dict, repr=False, compare=False)


@functools.lru_cache(maxsize=64)
def _geometry(cfg: JobConfig) -> _Geometry:
    ho_n, wo_n = cfg.out_hw
    k_out = cfg.k_out
    rows_pad, cols_pad = _pad_flags(cfg, 0), _pad_flags(cfg, 1)
    # rows and columns that are padding for one subtile are still read where another subtile
    # reads them from memory
    row_pad, rows_agree = _row_flags(rows_pad)
    col_pad, cols_agree = _row_flags(cols_pad)
    written = np.ones((ho_n, wo_n, k_out), bool)
    if cfg.strided:
        keep = (np.arange(ho_n) % 3) % 2 == 0
        keepc = (np.arange(wo_n) % 3) % 2 == 0
        written &= keep[:, None, None] & keepc[None, :, None]
    yp, y0, y1, y2 = (cfg.reg("OUTFEAT_PTR"), cfg.reg("OUTFEAT_D0_STRIDE"),
                      cfg.reg("OUTFEAT_D1_STRIDE"), cfg.reg("OUTFEAT_D2_STRIDE"))
    oy = np.arange(ho_n, dtype=np.int64)[:, None, None]
    ox = np.arange(wo_n, dtype=np.int64)[None, :, None]
    kk = np.arange(k_out, dtype=np.int64)[None, None, :]

    def out_addr(size: int) -> np.ndarray:
        byte = kk * size
        return yp + oy * y2 + ox * y1 + (byte // 32) * y0 + byte % 32

    elem = cfg.out_bits // 8 if cfg.normquant else 4
    subtile = ((kk // cfg.ko_size) * cfg.nb[1] + oy // 3) * cfg.nb[2] + ox // 3
    dense = (yp, y2, y1) if y0 == 32 or k_out * elem <= 32 else None
    out = [rows_pad, cols_pad, ~row_pad[:, None] & ~col_pad[None, :], out_addr(elem),
           out_addr(4), np.broadcast_to(subtile, written.shape).copy(), written]
    for a in out:
        a.flags.writeable = False
    addresses = out[3]
    whole = (int(addresses.min()), int(addresses.max()) + elem) \
        if dense and addresses.size and written.all() else None
    rect = _rectangle(out[2], cfg.reg("INFEAT_D0_STRIDE"), cfg.reg("INFEAT_D1_STRIDE"))
    return _Geometry(*out[:3], rect, rows_agree and cols_agree, *out[3:], dense, whole)


def execute(cfg: JobConfig, read: Reader, l1: tuple[np.ndarray, int] | None = None
            ) -> JobResult:
    """The job's output, computed from memory as it is now (see the module docstring).
    ``l1`` (L1's bytes, its base address): where the whole job is one strided store
    (``JobResult.whole``), the outputs are written there as they are computed (``values``
    None; :func:`check_output` first), not kept and stored in another pass (issue 31 #2)."""
    g = _geometry(cfg)
    ho_n, wo_n = cfg.out_hw
    win = cfg.win
    x_ptr, d0, d1 = cfg.reg("INFEAT_PTR"), cfg.reg("INFEAT_D0_STRIDE"), cfg.reg("INFEAT_D1_STRIDE")
    shape = ((cfg.nb[1] - 1) * 3 + win, (cfg.nb[2] - 1) * 3 + win, cfg.k_in)
    w, wreads = weights(cfg, read)
    launches = kept_for(g.launches, id(w), w)  # the kernel's call, per weights array
    # padding 0 around one rectangle of memory (a 'same' layer): the kernel reads L1 where it
    # is and positions outside it as 0, so the input is not copied (issue 31 #2)
    box = _box(read, g.rect, cfg.k_in, x_ptr, d0, d1) \
        if g.agree and cfg.mode != 1 and cfg.pad_value == 0 else None
    if box is not None:
        y0, x0, view, span = box
        reads = [span, *wreads]
        acc = IC.conv_sums(view.transpose(2, 0, 1), IC.packed_weights(w), (ho_n, wo_n),
                           pad=(y0, x0), hwc=True, padded=True, launches=launches)
    else:
        img, reads = _gather(read, g.need, g.rect, shape, x_ptr, d0, d1, cfg.pad_value)
        reads += wreads
        if g.agree and cfg.mode != 1:  # one virtual image, its padding rows and columns set once
            acc = IC.conv_sums(img.transpose(2, 0, 1), IC.packed_weights(w), (ho_n, wo_n),
                               hwc=True, padded=True, launches=launches)
        else:  # depthwise always: its sums are a small part of the job
            sums = K.window_sums_depthwise if cfg.mode == 1 else K.window_sums
            acc = sums(img, w, g.rows_pad, g.cols_pad, np.uint8(cfg.pad_value), ho_n, wo_n)
    # acc: int32 [>= Ho, >= Wo, >= K], C-contiguous (the shared kernel's whole work array:
    # Winograd's has rows past Ho)
    if cfg.streamin:  # int32 arithmetic wraps as the accumulators do
        a = g.in32[g.written]
        lo, hi = int(a.min()), int(a.max()) + 4
        raw = read(lo, hi - lo, "streamin partial sums")
        part = np.zeros((ho_n, wo_n, cfg.k_out), np.int32)
        idx = (a - lo)[:, None] + np.arange(4)
        part[g.written] = raw[idx].view("<i4")[:, 0]
        acc = acc[:ho_n, :wo_n, :cfg.k_out] + part
        reads.append((lo, hi))
    elem = cfg.out_bits // 8 if cfg.normquant else 4
    if not cfg.normquant:  # the raw sums, as little-endian bytes
        # one copy (np.array always copies: acc may be conv_sums' reused work array)
        values = np.array(acc[:ho_n, :wo_n, :cfg.k_out], "<i4").view(np.uint8) \
            .reshape(ho_n, wo_n, cfg.k_out, 4)
    elif l1 is not None and g.whole is not None:
        data, base = l1
        check_output(g.whole[0], g.whole[1], elem, base, data.size)
        origin, out_d2, out_d1 = g.dense
        reads += normquant(cfg, acc, read, data, origin - base, out_d2, out_d1)
        values = None
    else:
        values = np.empty((ho_n, wo_n, cfg.k_out, elem), np.uint8)
        reads += normquant(cfg, acc, read, values.reshape(-1), 0, wo_n * cfg.k_out * elem,
                           cfg.k_out * elem)
    return JobResult(values, g.addresses, g.subtile, g.written, elem, reads, g.dense, g.ranges,
                     g.whole)


def check_output(lo: int, hi: int, elem: int, base: int, size: int) -> None:
    """DeviceError unless the output bytes [lo, hi) (elements of ``elem`` bytes) lie in L1
    (``size`` bytes at ``base``)."""
    if lo < base or hi > base + size:
        bad = lo if lo < base else hi - elem
        raise DeviceError(f"job output at {bad:#010x} is outside L1 ({base:#010x}-"
                          f"{base + size - 1:#010x})")


def normquant(cfg: JobConfig, acc: np.ndarray, read: Reader, mem: np.ndarray, origin: int,
              d2: int, d1: int) -> list[tuple[int, int]]:
    """N§3.5 over int32 sums ``acc`` [Ho, >= Wo, >= K] (C-contiguous): output (y, x, k) as
    little-endian bytes at ``origin + y*d2 + x*d1 + k*bytes`` of the flat uint8 ``mem``
    (emu/conv/ne16.py normquant); the ranges of the scales, biases and shifts read."""
    k = cfg.k_out
    sb = cfg.norm_bytes
    lo = cfg.reg("SCALE_PTR")
    scale = read(lo, k * sb, "scale").view(f"<u{sb}").astype(np.int64)  # unsigned, little-endian
    reads = [(lo, lo + k * sb)]
    bias = shift = None
    if cfg.norm_bias:
        b0 = cfg.reg("SCALE_BIAS_PTR")
        bias = read(b0, 4 * k, "bias").view("<i4").astype(np.int64)
        reads.append((b0, b0 + 4 * k))
    if cfg.norm_shift:
        s0 = cfg.reg("SCALE_SHIFT_PTR")
        shift = (read(s0, k, "shift") & 0x3F).astype(np.int64)
        reads.append((s0, s0 + k))
    ho, wo = cfg.out_hw
    IC.launch_rows(K.normquant, K.normquant_parallel,
                   (np.ascontiguousarray(acc), scale,
                    bias if bias is not None else np.zeros(k, np.int64),
                    shift if shift is not None else np.full(k, cfg.right_shift, np.int64),
                    cfg.norm_bias, cfg.relu, cfg.out_bits, ho, wo, k, mem, origin, d2, d1),
                   ho, ho * wo * k, PARALLEL_ELEMENTS)
    return reads

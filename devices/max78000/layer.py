"""MAX78000: decode one layer's registers (all quadrants) into a plain description of the layer
as the hardware sees it.

Citations (docs/citations.md): "[UG-CNN: ...]" = a table or heading of the user guide's CNN
chapter, "[AI8X: ...]" = a heading of the ai8x training/synthesis documentation; "R7#n" = a
MAX78000 implementer decision, "A§x" = a section of the project's notes on [AI8X] (both
resolved in docs/citations.md).
"[izer]" marks a public fact read in analogdevicesinc/ai8x-synthesis (HEAD ab4f4c01): the value
the generator writes into a register, which pins down a field's meaning the seeds leave open.

Hardware model decoded here (the datapath in datapath.py executes it):

* Processor p (global 0..63) = quadrant p//16, local l = p%16; it reads its own data memory
  q*4 + l//4, byte lane l%4 [UG-CNN: Overview], [AI8X: Data Memory], and its own MRAM block
  [UG-CNN: Table 27-5].
* Input: HWC, ``in_passes`` words per pixel (LCTRL1.inpchexp + 1, [UG-CNN: Table 27-39],
  [AI8X: Multi-Pass]); the word of pixel (r, c), pass e is ``rptr_base + (r*cols + c)*in_passes +
  e`` (RPTR_BASE is a word index, R7#27).
* Mask (kernel) counter: runs from MCNT.mcnt_sad to mcnt_max stepping by the weight width, one
  step per (output slot, input pass) with the pass innermost ([UG-CNN: Table 27-35]; R7#24: the
  value is a bit address, ``>>3`` = 72-bit word for 3x3 kernels; [izer] max7800x.py writes
  mcnt_sad = 8*kern_offs and mcnt_max = mcnt_sad + (kern_count-1)*bits, kern_count = output
  slots * passes; for 1x1 kernels it writes 9*8*kern_offs, so ``>>3`` is a *byte* address in the
  9-byte words).
* Output slot t = e*slots_per_pass + k (e = output pass, LCTRL1.xpch_max = (slots_per_pass-1)*bits
  [izer]; [UG-CNN: Table 27-39], R7#25). Slot k of a pass goes to write pointer
  ``wptr_base + (k//4)*wptr_moff + e*wptr_choff + pixel*pixel_step``
  [UG-CNN: CNNx16_n Per Layer Registers (CNNx16_n_Ly)], byte lane k%4 (8-bit output) or word offset
  k%4 (32-bit output, [izer] unload.py writes the 4 channels of a quad to 4 consecutive words).
  pixel_step = 1 + wptr_inc [UG-CNN: Table 27-39], times 4 for bigdwrt. The pointer is a 17-bit
  global word address: bits 16:13 = data memory (quadrant*4 + group), 12:0 = word (R7#26).
* Bias: byte ``bptr_sad + t`` of the BRAM of every quadrant with bptr_en, added as bias << 7
  ([UG-CNN: Table 27-38], "+1 per mask count increment"; counted per output slot, not per input
  pass).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..description import FieldView
from ..errors import DeviceError

QUADRANTS = 4
LAYERS = 32
MRAM_BASE = 0x5018_0000  # + q*0x40_0000 + l*0x4000 [UG-CNN: CNNx16_n MRAM Details]
BRAM_BASE = 0x5010_8000  # + q*0x40_0000, 4 bytes per entry ([AI8X: Bias memory], R7#4)
SRAM_BASE = 0x5040_0000  # + q*0x40_0000 + g*0x8000 [AI8X: Data memory]
QUAD_STRIDE = 0x40_0000
MRAM_WORDS = 768  # 768 x 72 bit per processor [UG-CNN: CNNx16_n MRAM Details]
SRAM_WORDS = 8192  # 8192 x 32 bit per data memory [AI8X: Limitations of MAX78000 Networks]
BIAS_ENTRIES = 512  # 512 x 8 bit per quadrant [UG-CNN: Memory Configuration]

#: POST.mask_size -> weight bits: 0 = 8, 1 = 1, 2 = 2, 3 = 4 bits ([UG-CNN: Table 27-38]; the enum
#: of configs/max78000.toml names them bits8 .. bits4, checked by tests/max78000)
WEIGHT_BITS = (8, 1, 2, 4)

# average-pool policies (same numbers as accelstub.emu.pool.max78000.AVG_*; A7#A3)
AVG_POLICIES = {"izer": (0, 1), "seed": (2, 3)}


@dataclass(frozen=True)
class Processor:
    """One enabled processor of the layer."""

    index: int  # global 0..63
    quadrant: int
    local: int  # 0..15 inside the quadrant
    memory: int  # global data memory 0..15 = quadrant*4 + local//4
    lane: int  # byte lane local%4
    read_word: int  # RPTR_BASE of its quadrant (word index in its data memory)
    mram_base: int  # CPU address of its MRAM block
    mcnt_sad: int  # MCNT of its quadrant
    mcnt_max: int


@dataclass(frozen=True)
class LayerConfig:
    """One layer as the hardware sees it. Every field says which register it comes from."""

    layer: int
    master: int  # quadrant whose control/post registers rule (lowest quadrant with processors)
    quadrants: tuple[int, ...]  # quadrants with processors enabled (EN.pro_en != 0)
    # -- input geometry (RCNT/CCNT, [UG-CNN: CNNx16_n Per Layer Registers (CNNx16_n_Ly)]): rows =
    # rcnt_max + 1 - 2*pad
    rcnt_max: int
    ccnt_max: int
    pad_rows: int  # RCNT.rcnt_pad (0-3, R7#22)
    pad_cols: int  # CCNT.ccnt_pad
    in_rows: int
    in_cols: int
    # -- pooling (CTRL.pool_en|LCTRL0.pool_en, CTRL.calcmax|LCTRL0.maxpl_en, R7#16; PRCNT/PCCNT =
    #    size-1 and STRIDE = pool stride-1, R7#33 and [izer]; CTRL.poolrnd, R7#17)
    pool_enabled: bool
    pool_kind: str  # "max" | "avg" | "none" (1x1 window: decimation by the stride)
    pool_rows: int
    pool_cols: int
    pool_stride: int
    pool_round: bool
    avg_policy: int  # kernel AVG_* code chosen from pool_round and the module policy
    pooled_rows: int
    pooled_cols: int
    # -- convolution (ONED.oned_width 0 = 3x3, 1 = 1x1 [izer]; stride always 1, A§1.11)
    kernel_rows: int
    kernel_cols: int
    conv_stride: int
    out_rows: int
    out_cols: int
    weight_bits: int  # POST.mask_size: 0 = 8, 1 = 1, 2 = 2, 3 = 4 bits [UG-CNN: Table 27-38]
    processors: tuple[Processor, ...]
    pro_en: tuple[int, ...]  # per quadrant EN.pro_en
    mask_en: tuple[int, ...]  # per quadrant EN.mask_en
    # -- multi-pass (LCTRL1, [UG-CNN: Table 27-39])
    in_passes: int  # inpchexp + 1
    xpch_max: int
    wptr_inc: int
    mask_steps: int  # (mcnt_max - mcnt_sad)/bits + 1
    out_slots: int  # mask_steps / in_passes
    slots_per_pass: int  # xpch_max/bits + 1
    out_passes: int
    # -- output (WPTR_*, [UG-CNN: CNNx16_n Per Layer Registers (CNNx16_n_Ly)]; LCTRL0.bigdwrt
    # [UG-CNN: Table 27-34])
    wptr_base: int
    wptr_toff: int
    wptr_moff: int
    wptr_choff: int
    pixel_step: int
    wide: bool  # bigdwrt: 32-bit accumulator output
    # -- post-processing (POST, [UG-CNN: Table 27-38])
    bias: tuple[tuple[int, int], ...]  # (quadrant, bptr_sad) for each quadrant with bptr_en
    shift: int  # +scale_reg (scale_shft=0, left) or -scale_reg (right): total shift s of A§1.8
    activation: str  # "none" | "relu" | "abs" (out_abs wins over act_en, [UG-CNN: Table 27-38])
    # -- decoded but not executed (DeviceError raised where they matter)
    tptr_sad: int = 0
    tptr_max: int = 0
    flatten: bool = False
    xpmp_cnt: int = 0
    ewise_en: bool = False
    ewise_func: int = 0
    ewise_cnt: int = 0
    prepool: bool = False
    conv2d_after_ewise: bool = False
    ts_en: bool = False
    tscnt_max: int = 0
    cnnsi_en: int = 0
    passthrough: bool = False  # no convolution: onexone_en (mask_en = 0) or ewise without conv
    deconv: bool = False  # POST.deconv_en: in_rows/in_cols are the stored (unstuffed) sizes
    operands: int = 1  # element-wise operands (ONED.ewise_cnt + 1), interleaved per word
    pt_out: tuple = ()  # pass-through: (write word of pass 0 / pixel 0, lane) per processor
    chw: bool = False  # LCTRL0.parallel / CTRL.bigdata: CHW input, 4 pixels per word
    oned: bool = False  # ONED.oned_en
    oned_sad: int = 0  # ONED.oned_sad: first byte of the layer's kernels in the mask word
    kernel_bytes: int = 9  # bytes of one 8-bit kernel in the mask words (9, 1 or 1-D width)
    sum_quadrant: int = 0  # quadrant whose LCTRL0.cnnsi_en sums the partial sums
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def in_channels(self) -> int:
        return len(self.processors) * self.in_passes


def decode_layer(regs_read: Callable[[str], FieldView],
                 quadrants: Sequence[int] = range(QUADRANTS), layer: int = 0,
                 avg_policy: str = "izer") -> LayerConfig:
    """Decode layer ``layer`` from the registers of ``quadrants`` (names as in
    configs/max78000.toml, read through ``regs_read`` as FieldViews, e.g. RegisterFile.view:
    every field is read by its name in the description, issue 33 #1). Raises DeviceError
    naming the layer and the register for configurations the datapath does not support yet."""
    y = layer

    def reg(q: int, name: str) -> FieldView:
        return regs_read(f"CNNx16_{q}_L{y}_{name}") if not name.startswith("@") else \
            regs_read(f"CNNx16_{q}_{name[1:]}")

    def fail(q: int, name: str, why: str) -> DeviceError:
        rname = f"CNNx16_{q}_{name[1:]}" if name.startswith("@") else f"CNNx16_{q}_L{y}_{name}"
        return DeviceError(f"layer {y}: {rname}: {why}")

    quadrants = tuple(quadrants)
    en = {q: reg(q, "EN") for q in quadrants}
    active = tuple(q for q in quadrants if en[q].pro_en)  # EN.pro_en [UG-CNN: Table 27-37]
    if not active:
        raise fail(quadrants[0] if quadrants else 0, "EN", "no processor enabled (pro_en = 0)")
    m = active[0]
    ctrl = reg(m, "@CTRL")
    lctrl0 = reg(m, "LCTRL0")
    lctrl1 = reg(m, "LCTRL1")
    oned = reg(m, "ONED")
    post = reg(m, "POST")
    # The quadrant that sums the partial sums of the others (LCTRL0.master, cnnsi_en "add other
    # quadrants' sums", [UG-CNN: Table 27-34]) need not have processors of its own: [izer]
    # max7800x.py writes cnnsi_en only into groups_used[0] (always quadrant 0) even when the
    # layer runs on quadrants 2-3 only (vendor cifar-10 layer 4: q0 LCTRL0 = 0xcb20, its
    # processors all off). The summing quadrant is therefore the lowest quadrant <= m whose
    # cnnsi_en is non-zero, else m itself.
    s = next((q for q in quadrants if q <= m and reg(q, "LCTRL0").cnnsi_en), m)

    # -- unsupported global modes --------------------------------------------------------------
    # CTRL.fifo_en / stream_en: the device feeds such input itself (devices/max78000/fifo.py,
    # stream.py): layer 0 from the FIFOs, stream layers frame-at-once
    streamed = bool(ctrl.fifo_en and y == 0) or bool(
        ctrl.stream_en and y < 8 and regs_read(f"CNNx16_{m}_S{y}_STRM0").strm_isval)
    for name in ("ffifo_en", "qupac", "simple1b"):
        if getattr(ctrl, name):
            raise fail(m, "@CTRL", f"{name} is not supported yet")
    # CHW ("big data") input: LCTRL0.parallel per layer ([UG-CNN: Table 27-34], "one channel uses 4
    # bytes") or CTRL.bigdata globally [UG-CNN: Table 27-19]; [izer] writes only LCTRL0 bit 6
    # (0x40).
    chw = bool(lctrl0.parallel | ctrl.bigdata)
    if lctrl0.mslave or lctrl0.sslave:
        raise fail(m, "LCTRL0", "mslave/sslave field sharing is not supported yet")
    if lctrl0.cpad_only:
        raise fail(m, "LCTRL0", "cpad_only is not supported yet")
    if not lctrl0.sramlsrc:
        # [izer] always sets sramlsrc (bit 11) for global writes; local-source writes untested
        raise fail(m, "LCTRL0", "sramlsrc = 0 (local write source) is not supported yet")
    oned_en = bool(oned.oned_en)
    # element-wise: ONED.ewise_en, ewise_func (00 sub, 01 add, 10 or, 11 xor), prepool,
    # 2d_conv (conv2d_en), ewise_cnt = operands - 1 [UG-CNN: Table 27-25]
    ewise = bool(oned.ewise_en)
    operands = oned.ewise_cnt + 1 if ewise else 1
    if ewise and oned_en:
        raise fail(m, "ONED", "1-D convolution with element-wise operations is not supported "
                   "[AI8X: MAX78000 Hardware and Resources / Overview]")
    oned_width = oned.oned_width
    oned_sad = oned.oned_sad  # start byte inside the 9-byte mask word [UG-CNN: Table 27-25]
    if oned_en and not 1 <= oned_width <= 9:
        raise fail(m, "ONED", f"oned_width {oned_width}: a 1-D kernel is 1 to 9 wide")
    if not oned_en and oned_width not in (0, 1):
        raise fail(m, "ONED", f"oned_width {oned_width} without oned_en is not supported")
    if oned_sad > 8:
        raise fail(m, "ONED", f"oned_sad {oned_sad} beyond the 9-byte mask word")
    flatten = bool(post.flatten_en)
    deconv = bool(post.deconv_en)  # zero insertion in TRAM [UG-CNN: Table 27-38]
    # Pass-through: POST.onexone_en with mask_en = 0 for the processors ("per-processor choice
    # via mask_en", [UG-CNN: Table 27-38]); [izer] writes POST = 3<<24 (ts_en|onexone_en), EN =
    # pro_en only, ONED = tscnt_max | 1<<8, MCNT = (out_expand-1)*8 for operation None
    passthrough = bool(post.onexone_en)
    if ewise and not oned.conv2d_en:
        # element-wise without 2d_conv: no convolution, timeslot output as pass-through
        # ([izer] POST = 1<<24 (ts_en) for operation None with operands > 1)
        if not post.ts_en:
            raise fail(m, "POST", "element-wise operation without 2d_conv needs ts_en "
                       "[UG-CNN: Table 27-25]")
        passthrough = True
    elif ewise and passthrough:
        raise fail(m, "POST", "onexone_en with 2d_conv element-wise is not supported")
    if passthrough:
        for q in active:
            if en[q].mask_en:
                raise fail(q, "EN", "onexone_en with mask_en != 0 (1x1 convolution in "
                           "timeslots) is not supported yet")
    elif post.ts_en and not ewise:
        raise fail(m, "POST", "ts_en (timeslots) without pass-through is not supported yet")

    # -- quadrants must agree on geometry and mask range ---------------------------------------
    # the izer writes identical values into every used group for these registers ([izer])
    for name in ("RCNT", "CCNT", "ONED", "PRCNT", "PCCNT", "STRIDE", "LCTRL1"):
        v = reg(m, name).raw
        for q in active[1:]:
            if reg(q, name).raw != v:
                raise fail(q, name, f"differs from quadrant {m} (unsupported)")
    # LCTRL0.cnnsi_en of the summing quadrant [UG-CNN: Table 27-34]
    cnnsi = reg(s, "LCTRL0").cnnsi_en
    for q in active:
        # pass-through quadrants write their own channels, no partial sums ([izer] sets no
        # cnnsi_en for operation None)
        if q != s and not (cnnsi >> q) & 1 and not passthrough:
            raise fail(s, "LCTRL0", f"quadrant {q} has processors enabled but cnnsi_en does "
                       "not add its partial sum (separate partial outputs unsupported)")

    # -- geometry (RCNT/CCNT: max = 2*pad + rows - 1, [UG-CNN: Table 27-23])
    # --------------------------------
    rcnt, ccnt = reg(m, "RCNT"), reg(m, "CCNT")
    rcnt_max, pad_r = rcnt.rcnt_max, rcnt.rcnt_pad
    ccnt_max, pad_c = ccnt.ccnt_max, ccnt.ccnt_pad
    in_rows, in_cols = rcnt_max + 1 - 2 * pad_r, ccnt_max + 1 - 2 * pad_c
    if deconv:
        # RCNT/CCNT count the zero-stuffed rows/columns ([izer] in_row = stride*H with
        # stride 2, vendor upsample: 5x7 input, pad 1 -> RCNT 0x1000b): memory holds half
        if in_rows % 2 or in_cols % 2:
            raise fail(m, "RCNT", f"deconv_en with an odd stuffed size {in_rows}x{in_cols}")
        if oned_en or passthrough or oned_width == 1:
            raise fail(m, "POST", "deconv_en is supported with 3x3 kernels only "
                                  "[AI8X: Limitations of MAX78000 Networks]")
        in_rows, in_cols = in_rows // 2, in_cols // 2
    if in_rows < 1:
        raise fail(m, "RCNT", f"rcnt_max {rcnt_max} < 2*rcnt_pad")
    if in_cols < 1:
        raise fail(m, "CCNT", f"ccnt_max {ccnt_max} < 2*ccnt_pad")

    # -- pooling -------------------------------------------------------------------------------
    pool_en = bool(ctrl.pool_en | lctrl0.pool_en)  # R7#16
    pool_max = bool(ctrl.calcmax | lctrl0.maxpl_en)
    pr, pc = reg(m, "PRCNT").prcnt_max + 1, reg(m, "PCCNT").pccnt_max + 1
    stride = reg(m, "STRIDE").stride + 1  # 4 bits, R7#33
    pool_round = bool(ctrl.poolrnd)
    if pool_en:
        kind = "max" if pool_max else "avg"
    else:
        # [izer] sets pool_en only for windows > 1 but still writes pool_stride-1 into STRIDE:
        # a 1x1 window with a stride is decimation (public fact: izer simulate.pooling_layer)
        kind, pr, pc = "none", 1, 1
    if pr > in_rows or pc > in_cols:
        raise fail(m, "PRCNT", f"pool window {pr}x{pc} larger than the input {in_rows}x{in_cols}")
    pooled_r = (in_rows - pr) // stride + 1
    pooled_c = (in_cols - pc) // stride + 1
    trunc_code, round_code = AVG_POLICIES[avg_policy]

    # -- kernel and weights --------------------------------------------------------------------
    if oned_en:
        # 1-D: a kernel of oned_width taps along the rows if rcnt_max != 0, else along the
        # columns [UG-CNN: Table 27-25]; [izer] writes the length into RCNT and leaves CCNT 0 (1
        # column)
        kr, kc = (oned_width, 1) if rcnt_max else (1, oned_width)
    elif passthrough:
        kr = kc = 1  # no convolution ([izer] ONED has no width bits for element-wise None)
    else:
        kr = kc = 1 if oned_width == 1 else 3
    ksize = kr * kc  # bytes (8-bit weights) of one kernel in the 9-byte mask words
    sr, sc = (2 * pooled_r, 2 * pooled_c) if deconv else (pooled_r, pooled_c)
    out_r, out_c = sr + 2 * pad_r - kr + 1, sc + 2 * pad_c - kc + 1
    if out_r < 1 or out_c < 1:
        raise fail(m, "RCNT", "output would be empty")
    mask_size = post.mask_size
    bits = WEIGHT_BITS[mask_size]
    for q in active[1:]:
        if reg(q, "POST").mask_size != mask_size:
            raise fail(q, "POST", "mask_size differs between quadrants")

    in_passes = lctrl1.inpchexp + 1
    if flatten:
        # flatten_en: xpmp_cnt is 4 more MSBs of the pass count, "up to 256" [UG-CNN: Table 27-38];
        # [izer] writes in_expand*H*W - 1 split over inpchexp (3:0) and xpmp_cnt (POST 21:18)
        in_passes = (post.xpmp_cnt << lctrl1.fields["inpchexp"].width | lctrl1.inpchexp) + 1
    xpch_max = lctrl1.xpch_max
    wptr_inc = lctrl1.wptr_inc

    procs = []
    steps = None
    for q in active:
        pro, mask = en[q].pro_en, en[q].mask_en
        if passthrough:
            mask = pro
        if pro != mask:
            raise fail(q, "EN", f"mask_en {mask:#06x} != pro_en {pro:#06x} (pass-through "
                       "processors are not supported yet)")
        mcnt = reg(q, "MCNT")
        sad, mx = mcnt.mcnt_sad, mcnt.mcnt_max
        span = mx - sad
        if passthrough:
            # the mask counter only counts the passes, 8 per pass ([izer] (out_expand-1)*8)
            if sad or mx % 8:
                raise fail(q, "MCNT", f"pass-through mask count {mcnt.raw:#x} is not "
                           "0 .. (passes-1)*8")
            n = mx // 8 + 1
        elif span < 0 or span % bits:
            raise fail(q, "MCNT", f"mcnt_max {mx:#x} - mcnt_sad {sad:#x} is not a non-negative "
                       f"multiple of the weight width {bits}")
        else:
            n = span // bits + 1
        if steps is None:
            steps = n
        elif n != steps:
            raise fail(q, "MCNT", "mask count range differs between quadrants")
        if not passthrough:
            if ksize == 9 and bits == 8 and sad & 7:
                raise fail(q, "MCNT", "mcnt_sad & 7 != 0 with 8-bit 3x3 weights")
            # mask address: (counter >> 3) counts kernels of ksize bytes from byte oned_sad of
            # the layer's first word ([izer] koffs, oned_sad = divmod(9*kern_offs, ksize))
            last = ((mx >> 3) * ksize + oned_sad + ksize - 1) // 9
            if last >= MRAM_WORDS:
                raise fail(q, "MCNT", f"mask address {mx:#x} beyond the 768 MRAM words")
        rptr = reg(q, "RPTR_BASE").rptr_base
        for local in range(16):
            if (pro >> local) & 1:
                p = q * 16 + local
                if chw and local % 4:
                    raise fail(q, "EN", f"processor {p} enabled in parallel (CHW) mode: the "
                               "4 bytes of a word go to the first processor of each group of "
                               "4 [UG-CNN: Table 27-34], others are not supported")
                procs.append(Processor(p, q, local, q * 4 + local // 4, local % 4, rptr,
                                       MRAM_BASE + q * QUAD_STRIDE + local * 0x4000, sad, mx))
    assert steps is not None
    pt_out: list[tuple[int, int]] = []
    if passthrough:
        # Pass-through output ([izer] "output processors must be a packed version of the input
        # processors"; vendor passthrough-2: processors 0,4,8,12 -> lanes 0-3 of one word): the
        # k-th enabled processor of a quadrant goes to timeslot k//4, lane k%4, at that
        # quadrant's WPTR_BASE + timeslot*WPTR_TOFF ([UG-CNN: Table 27-30]; [izer] writes a
        # WPTR_BASE per group for operation None); ONED.tscnt_max bounds the timeslots
        # [UG-CNN: Table 27-25].
        if steps != in_passes:
            raise fail(m, "MCNT", f"pass-through counts {steps} passes, LCTRL1 has {in_passes}")
        tscnt = oned.tscnt_max
        for q in active:
            mine = [pp for pp in procs if pp.quadrant == q]
            if (len(mine) - 1) // 4 > tscnt:
                raise fail(q, "ONED", f"{len(mine)} pass-through processors need "
                           f"{(len(mine) + 3) // 4} timeslots, tscnt_max is {tscnt}")
            wb, toff = reg(q, "WPTR_BASE").wptr_base, reg(q, "WPTR_TOFF").wptr_toff
            pt_out += [(wb + (k // 4) * toff, k % 4) for k in range(len(mine))]
        out_slots = len(procs)
        slots_per_pass = len(procs)
        out_passes = in_passes
    else:
        if steps % in_passes:
            raise fail(m, "MCNT", f"{steps} mask steps is not a multiple of {in_passes} input "
                       "passes")
        out_slots = steps // in_passes
        if xpch_max % bits:
            raise fail(m, "LCTRL1", f"xpch_max {xpch_max} is not a multiple of {bits}")
        slots_per_pass = xpch_max // bits + 1
        out_passes = -(-out_slots // slots_per_pass)
    if chw and in_passes > 1:
        raise fail(m, "LCTRL1", "multi-pass CHW input is not supported")
    # CHW: 4 consecutive pixels of one channel per word, LSB first ([izer] load.py
    # shift = (row*W + col) % 4; [UG-CNN: Table 27-34])
    words_in = -(-in_rows * in_cols // 4) if chw else in_rows * in_cols * in_passes * operands
    if chw and ewise:
        raise fail(m, "ONED", "element-wise operations on CHW input are not supported")
    for pr_ in procs:
        if pr_.read_word + words_in > SRAM_WORDS and not streamed:
            raise fail(pr_.quadrant, "RPTR_BASE", f"input ({words_in} words from "
                       f"{pr_.read_word:#x}) runs past the end of data memory")

    # -- output --------------------------------------------------------------------------------
    wide = bool(lctrl0.bigdwrt)
    wptr_base = reg(m, "WPTR_BASE").wptr_base
    pixel_step = (1 + wptr_inc) * (4 if wide else 1)
    if passthrough:
        if wide:
            raise fail(m, "LCTRL0", "bigdwrt with pass-through is not supported")
        # [izer] writes wptr_inc = write_gap (not out_expand*(write_gap+1)-1 as for
        # convolutions) and CHOFF = write_gap+1: the pointer steps over all passes of a pixel
        # (vendor passthroughmultipass: 2 passes, wptr_inc 0, pixels 2 words apart)
        pixel_step = (1 + wptr_inc) * in_passes

    # -- post-processing -----------------------------------------------------------------------
    scale = post.scale_reg
    shift = -scale if post.scale_shft else scale
    # The register holds the *total* shift: [izer] checkpoint.py adds 8 - weight_bits to the
    # checkpoint's output_shift and max7800x.py writes that sum into scale_reg/scale_shft.
    if post.out_abs:
        act = "abs"
    elif lctrl0.act_en:
        act = "relu"
    else:
        act = "none"
    bias = []
    for q in sorted(set(active) | {s} | {q for q in quadrants if (cnnsi >> q) & 1}):
        pq = reg(q, "POST")
        if pq.bptr_en:
            if passthrough:
                raise fail(q, "POST", "bias with pass-through is not supported")
            sad = pq.bptr_sad
            if sad + out_slots > BIAS_ENTRIES:
                raise fail(q, "POST", f"bias bytes {sad}..{sad + out_slots - 1} beyond the "
                           f"{BIAS_ENTRIES}-entry bias memory")
            bias.append((q, sad))
    tptr = reg(m, "TPTR")

    return LayerConfig(
        layer=y, master=m, quadrants=active,
        rcnt_max=rcnt_max, ccnt_max=ccnt_max, pad_rows=pad_r, pad_cols=pad_c,
        in_rows=in_rows, in_cols=in_cols,
        pool_enabled=pool_en, pool_kind=kind, pool_rows=pr, pool_cols=pc, pool_stride=stride,
        pool_round=pool_round, avg_policy=round_code if pool_round else trunc_code,
        pooled_rows=pooled_r, pooled_cols=pooled_c,
        kernel_rows=kr, kernel_cols=kc, conv_stride=1, out_rows=out_r, out_cols=out_c,
        weight_bits=bits, processors=tuple(procs),
        pro_en=tuple(en[q].pro_en for q in quadrants),
        mask_en=tuple(en[q].mask_en for q in quadrants),
        in_passes=in_passes, xpch_max=xpch_max, wptr_inc=wptr_inc, mask_steps=steps,
        out_slots=out_slots, slots_per_pass=slots_per_pass, out_passes=out_passes,
        wptr_base=wptr_base, wptr_toff=reg(m, "WPTR_TOFF").wptr_toff,
        wptr_moff=reg(m, "WPTR_MOFF").wptr_moff, wptr_choff=reg(m, "WPTR_CHOFF").wptr_choff,
        pixel_step=pixel_step, wide=wide,
        bias=tuple(bias), shift=shift, activation=act,
        tptr_sad=tptr.tptr_sad, tptr_max=tptr.tptr_max,
        flatten=flatten, xpmp_cnt=post.xpmp_cnt,
        passthrough=passthrough, pt_out=tuple(pt_out), operands=operands, deconv=deconv,
        chw=chw, oned=oned_en, oned_sad=oned_sad, kernel_bytes=ksize, sum_quadrant=s,
        ewise_en=bool(oned.ewise_en), ewise_func=oned.ewise_func,
        ewise_cnt=oned.ewise_cnt, prepool=bool(oned.prepool),
        conv2d_after_ewise=bool(oned.conv2d_en), ts_en=bool(post.ts_en),
        tscnt_max=oned.tscnt_max, cnnsi_en=cnnsi,
    )


#: modelled timing (R7#42: the tools estimate with a 4-cycle start and 2 cycles of row
#: overhead; the seed gives "1 output channel per clock", [UG-CNN: Overview])
C_START, C_ROW = 4, 2


def layer_cycles(cfg: LayerConfig) -> int:
    """Modelled cycles of one layer: a start overhead, then per output row a row overhead plus
    one clock per output channel (and input pass) at every output position: the 64 processors
    compute the products of one output channel for one position in parallel [UG-CNN: Overview].
    Check: the layer shapes of the ai8x MNIST example give 66,340 cycles by this formula against
    the 70,157 the silicon takes (issue 3 figure). A model, not the silicon: labelled as such in
    the description (EMU_CYCLES)."""
    per_position = cfg.out_slots * cfg.in_passes
    return C_START + cfg.out_rows * (C_ROW + cfg.out_cols * per_position)

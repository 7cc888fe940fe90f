"""Ethos-U85 weight streams (standard SWD and fast FWD decoders), the weight (un)ordering that
maps decoded streams to W[oc][ky][kx][ic], and the scale-and-bias stream.

Source: [U85-TRM: §3.7, §3.9] (the reconstruction of the weight ordering, and the gaps
G-W1..G-W12). Bits are read LSB first within each byte, multi-bit fields LSB first
[U85-TRM: §3.9.3].

The encoders (:func:`encode_swd`, :func:`encode_fwd`, :func:`encode_scale_stream`,
:func:`order_weights`) exist to build test streams; they are written from the format
description, not from the decoder's code.
"""
from __future__ import annotations

import functools
import math
from collections import OrderedDict

import numpy as np

from .. import kernel_plan as KP
from ..jit import njit

# weight-decoder configuration per MAC count [U85-TRM: Table 3-90]: num_wd, dw8_pad_k,
# dw16_pad_k
WD_CONFIG = {128: (1, 0, 2), 256: (1, 0, 2), 512: (2, 2, 2), 1024: (4, 6, 6), 2048: (4, 6, 6)}
# microblock_depth() divisor per ACC_FORMAT.microblock u1x1..u4x4 [U85-TRM: §3.6.4]
MICROBLOCK_DIV = (8, 16, 32, 32, 64, 128)

# decoder status codes
SWD_OK, SWD_OVERRUN, SWD_FULL, SWD_RESERVED, SWD_BAD_QUOTIENT = 0, 1, 2, 3, 4


#: what the decoder and the walk cost interpreted (kernel_plan.tiered: they are interpreted
#: while a program's weights are few), per stream byte (SWD) and per ordered value (the walk),
#: as measured on the 2-core AMD EPYC (Zen 4): the bundled demo's 4640 weights take ~0.08 s
#: interpreted, ~2.7 s of CPU to compile (issue 31 #5)
SWD_S_PER_BYTE = 80e-6
WALK_S_PER_VALUE = 1e-6


def microblock_depth(macs_per_cc: int, microblock: int) -> int:
    """microblock_depth() = macs_per_cc / {8, 16, 32, 32, 64, 128}[microblock] [U85-TRM: §3.6.4]."""
    return macs_per_cc // MICROBLOCK_DIV[microblock]


def channels_in_set(macs_per_cc: int, microblock: int) -> int:
    """Scale-stream channel set size align_up(microblock_depth(), 16) [U85-TRM: §3.7.1]."""
    d = microblock_depth(macs_per_cc, microblock)
    return (d + 15) // 16 * 16


# ------------------------------------------------------------------------------------------------
# SWD decoder [U85-TRM: §3.9]

@njit(nogil=True, cache=True)
def _bits(buf, st, n):
    """SYMBOL_UINT(n) [U85-TRM: §3.9.3]: n bits LSB first from bit position st[0]; st[1] counts bits
    read past the end of buf (they read as 0)."""
    v = np.int64(0)
    p = st[0]
    nb = buf.size * 8
    for i in range(n):
        if p < nb:
            v |= np.int64((buf[p >> 3] >> (p & 7)) & 1) << i
        else:
            st[1] += 1
        p += 1
    st[0] = p
    return v


@njit(nogil=True, cache=True)
def _swd_decode(buf, out):
    """Decode one SWD stream into ``out``; returns (count, status, bit position).

    Stream [U85-TRM: §3.9]: repeat { zdiv:3 (0-3 alternating, 6 no zero runs, 7 end, 4/5 reserved);
    slicelen-1:15; wdiv:3 (0-5 GRC, 7 uncompressed, 6 reserved); wtrunc:1; newpal:1;
    [dirofs:5 palsize:5 palbits:3 palette[palsize ? palsize+1 : 0] x (palbits+2) bits]; chunks }.
    Chunk [U85-TRM: §3.9.10]: balance = nw - nz; w_en = (balance < 8 || !alt) && nw < w_cnt;
    z_en = balance >= 0 && alt && nz < z_cnt; [wunary0:12][zunary:12 (zdiv<3) or 8]
    [wunary1:popcount(wunary0)] [previous chunk's weight remainders][previous zero-run
    remainders]; until neither was enabled. Zero-run slots beyond z_cnt are ignored (G-W7).
    Index -> value [U85-TRM: §3.9.6]: tmp = idx < palsize ? palette[idx] : idx - palsize + dirofs;
    value = tmp & 1 ? -(tmp >> 1) : tmp >> 1."""
    st = np.zeros(2, np.int64)
    n = 0
    palette = np.zeros(32, np.int64)
    pal_size = 0
    pal_bits = 2
    dirofs = 0
    nbits = buf.size * 8
    while True:
        if st[0] + 3 > nbits:
            return n, SWD_OVERRUN, st[0]
        zdiv = _bits(buf, st, 3)
        if zdiv == 7:
            break
        if zdiv == 4 or zdiv == 5:
            return n, SWD_RESERVED, st[0]
        slicelen = _bits(buf, st, 15) + 1
        wdiv = _bits(buf, st, 3)
        wtrunc = _bits(buf, st, 1)
        newpal = _bits(buf, st, 1)
        if wdiv == 6:
            return n, SWD_RESERVED, st[0]
        if newpal:
            dirofs = _bits(buf, st, 5)
            ps = _bits(buf, st, 5)
            pal_size = 0 if ps == 0 else ps + 1
            pal_bits = _bits(buf, st, 3) + 2
            for i in range(pal_size):
                palette[i] = _bits(buf, st, pal_bits)
        alt = zdiv < 4
        unc = wdiv == 7
        if pal_size > 0:
            unc_bits = 0
            while (1 << unc_bits) < pal_size:
                unc_bits += 1
        else:
            unc_bits = pal_bits
        wrem_bits = unc_bits if unc else wdiv
        unc_per_chunk = 12 if unc_bits <= 5 else 8
        zlen = 12 if zdiv < 3 else 8
        w_cnt = slicelen
        z_cnt = slicelen + newpal if alt else 0
        wi = np.zeros(w_cnt, np.int64)
        zr = np.zeros(z_cnt + 1, np.int64)
        nw = 0
        nz = 0
        wq = 0
        zq = 0
        wr_i = 0
        zr_i = 0
        prev_w = False
        prev_z = False
        prev_nw = 0
        prev_nz = 0
        while True:
            balance = nw - nz
            w_en = (balance < 8 or not alt) and nw < w_cnt
            z_en = balance >= 0 and alt and nz < z_cnt
            wunary0 = 0
            if w_en and not unc:
                wunary0 = _bits(buf, st, 12)
            if z_en:
                zunary = _bits(buf, st, zlen)
                for i in range(zlen):
                    if (zunary >> i) & 1:
                        zq += 1
                    else:
                        if nz < z_cnt:        # G-W7 bound
                            zr[nz] = zq << zdiv
                            nz += 1
                        zq = 0
            if w_en and not unc:
                pc = 0
                for i in range(12):
                    pc += (wunary0 >> i) & 1
                wunary1 = _bits(buf, st, pc)
                j = 0
                for i in range(12):
                    if nw >= w_cnt:
                        break
                    c = 0
                    if (wunary0 >> i) & 1:
                        c = 1 + ((wunary1 >> j) & 1)
                        j += 1
                    wq += c
                    if c < 2 or wtrunc:
                        if wq >= 32:
                            return n, SWD_BAD_QUOTIENT, st[0]
                        wi[nw] = wq << wdiv
                        nw += 1
                        wq = 0
            if w_en and unc:
                k = min(unc_per_chunk, w_cnt - nw)
                for _i in range(k):
                    wi[nw] = 0
                    nw += 1
            if prev_w:
                while wr_i < prev_nw:
                    wi[wr_i] += _bits(buf, st, wrem_bits)
                    wr_i += 1
            if prev_z:
                while zr_i < prev_nz:
                    zr[zr_i] += _bits(buf, st, zdiv)
                    zr_i += 1
            prev_w, prev_nw, prev_z, prev_nz = w_en, nw, z_en, nz
            if not (prev_w or prev_z):
                break
            if st[1] > 0:
                return n, SWD_OVERRUN, st[0]
        # output assembly
        zi = 0
        if alt and newpal:
            for _k in range(zr[0]):
                if n >= out.size:
                    return n, SWD_FULL, st[0]
                out[n] = 0
                n += 1
            zi = 1
        for i in range(w_cnt):
            idx = wi[i]
            tmp = palette[idx] if idx < pal_size else idx - pal_size + dirofs
            if n >= out.size:
                return n, SWD_FULL, st[0]
            out[n] = -(tmp >> 1) if tmp & 1 else tmp >> 1
            n += 1
            if alt:
                for _k in range(zr[zi]):
                    if n >= out.size:
                        return n, SWD_FULL, st[0]
                    out[n] = 0
                    n += 1
                zi += 1
    if st[1] > 0:
        return n, SWD_OVERRUN, st[0]
    return n, SWD_OK, st[0]


def decode_swd(stream, max_weights: int | None = None) -> tuple[np.ndarray, int, int]:
    """Decode one standard-weight-decoder stream (bytes or uint8 array). Returns
    (int64 weights, status SWD_*, bits consumed up to the end-of-stream marker). The stream ends
    at zdiv = 7 (then '1' padding to 128 bits); WEIGHT_LENGTH is only the fetch size (G-W9)."""
    buf = np.frombuffer(bytes(stream), np.uint8) if not isinstance(stream, np.ndarray) else \
        np.ascontiguousarray(stream, np.uint8)
    cap = max_weights if max_weights is not None else max(1024, buf.size * 64)
    while True:
        out = np.zeros(cap, np.int64)
        n, status, pos = KP.tiered(_swd_decode, SWD_S_PER_BYTE * buf.size, buf, out)(buf, out)
        if status != SWD_FULL or max_weights is not None:
            return out[:n], int(status), int(pos)
        cap *= 8


# ------------------------------------------------------------------------------------------------
# FWD ([U85-TRM: §3.9.11])

def decode_fwd(stream, count: int | None = None) -> np.ndarray:
    """Decode a fast-weight-decoder stream: a 256-bit header {raw_mode:1, small_lut:1, 102
    zero bits, zero_point: SINT8, 16 x (sign:1, abs:8)} then 256-bit words of 32 raw SINT8
    (value = raw - zero_point), 64 4-bit or (small_lut) 128 2-bit LUT indices
    (value = sign ? -abs : abs). One header per stream (G-W10, Vela fact). Returns int64 values
    (all payload words, or the first ``count``)."""
    b = np.frombuffer(bytes(stream), np.uint8) if not isinstance(stream, np.ndarray) else \
        np.ascontiguousarray(stream, np.uint8)
    hdr = int.from_bytes(bytes(b[:32]), "little")
    raw_mode, small = hdr & 1, (hdr >> 1) & 1
    zp = (hdr >> 104) & 0xFF
    zp = zp - 256 if zp >= 128 else zp
    lut = np.zeros(16, np.int64)
    for i in range(16):
        e = (hdr >> (112 + 9 * i)) & 0x1FF
        lut[i] = -(e >> 1) if e & 1 else (e >> 1)
    payload = b[32:]
    payload = payload[:payload.size // 32 * 32]
    if raw_mode:
        vals = payload.view(np.int8).astype(np.int64) - zp
    else:
        if small:
            idx = np.stack([(payload >> s) & 3 for s in (0, 2, 4, 6)], axis=1).ravel()
        else:
            idx = np.stack([payload & 15, payload >> 4], axis=1).ravel()
        vals = lut[idx.astype(np.int64)]
    return vals if count is None else vals[:count]


def encode_fwd(values, mode: str = "raw", zero_point: int = 0) -> bytes:
    """Build an FWD stream (tests): mode 'raw' (SINT8 raw = w + zero_point), 'lut' (<= 16
    distinct values) or 'small' (<= 4 distinct). Payload zero padded to 256 bits."""
    v = [int(x) for x in np.asarray(values).ravel()]
    hdr = 0
    if mode == "raw":
        hdr |= 1
        payload = bytes(((w + zero_point) & 0xFF) for w in v)
        per = 32
    else:
        distinct = sorted(set(v), key=lambda x: (abs(x), x))
        if mode == "small":
            hdr |= 2
        table = distinct + [0] * (16 - len(distinct))
        for i, w in enumerate(table):
            hdr |= ((abs(w) << 1 | (1 if w < 0 else 0)) & 0x1FF) << (112 + 9 * i)
        bitsper = 2 if mode == "small" else 4
        per = 256 // bitsper
        acc = 0
        for i, w in enumerate(v):
            acc |= table.index(w) << (bitsper * i)
        payload = acc.to_bytes((len(v) * bitsper + 7) // 8, "little")
    hdr |= (zero_point & 0xFF) << 104
    words = (len(v) + per - 1) // per
    payload = payload + bytes(words * 32 - len(payload))
    return hdr.to_bytes(32, "little") + payload


# ------------------------------------------------------------------------------------------------
# SWD encoder (tests only): from the format description of [U85-TRM: §3.9.3, §3.9]

class _BitWriter:
    def __init__(self):
        self.bits: list[int] = []

    def put(self, value: int, n: int):
        for i in range(n):
            self.bits.append((value >> i) & 1)

    def tobytes(self, align: int = 128) -> bytes:
        while len(self.bits) % align:
            self.bits.append(1)                     # '1' padding after zdiv = 7 [U85-TRM: §3.9.4]
        out = bytearray()
        for i in range(0, len(self.bits), 8):
            out.append(sum(b << k for k, b in enumerate(self.bits[i:i + 8])))
        return bytes(out)


def _sm(w: int) -> int:
    return (abs(w) << 1) | (1 if w < 0 else 0)


def encode_swd(values, *, zdiv: int = 0, wdiv: int = 0, wtrunc: bool = False,
               palette: list[int] | None = None, slice_len: int = 32768,
               newpal_pattern=(1,)) -> bytes:
    """Build one SWD stream for ``values`` (ints -255..255). zdiv 0-3 = alternating (zero
    runs coded), 6 = every value coded as an index; wdiv 0-5 GRC, 7 uncompressed. ``palette``:
    list of values for the palette (2-32 entries; others coded directly via dirofs), else
    direct mode. Slices hold at most slice_len coded weights; slice k>0 repeats the palette
    (newpal 1) when newpal_pattern[k % len] is 1."""
    vals = [int(x) for x in np.asarray(values).ravel()]
    alt = zdiv < 4
    pal = [_sm(p) for p in (palette or [])]
    pal_size = len(pal)
    dirofs = 0
    if pal:
        palbits = max(2, max(p.bit_length() for p in pal))
    else:
        palbits = max(2, max([_sm(v) for v in vals] + [0]).bit_length())
    assert palbits <= 9

    def index(w):
        t = _sm(w)
        if t in pal:
            return pal.index(t)
        return t - dirofs + pal_size

    def newpal_of(g):
        return 1 if g == 0 else newpal_pattern[g % len(newpal_pattern)]

    slices = []
    if alt:
        nzpos = [i for i, w in enumerate(vals) if w != 0]
        # all-zero data: one coded zero weight in a newpal slice [U85-TRM: §3.9.9]
        if not nzpos:
            slices = [([0], [0, len(vals) - 1], 1)]
        else:
            runs = [nzpos[0]] + [nzpos[i + 1] - nzpos[i] - 1 for i in range(len(nzpos) - 1)] \
                + [len(vals) - nzpos[-1] - 1]            # runs[i]: zeros before nonzero i
            starts = list(range(0, len(nzpos), slice_len))
            for g, s0 in enumerate(starts):
                e0 = min(s0 + slice_len, len(nzpos))
                newpal = newpal_of(g)
                zr = [runs[s0]] if newpal else []
                trailing = runs[s0 + 1:e0 + 1]
                if g + 1 < len(starts) and newpal_of(g + 1):
                    trailing[-1] = 0          # the next slice codes this run as its leading run
                slices.append(([vals[i] for i in nzpos[s0:e0]], zr + trailing, newpal))
    else:
        for g, i in enumerate(range(0, len(vals), slice_len)):
            slices.append((vals[i:i + slice_len], None, newpal_of(g)))
    bw = _BitWriter()
    unc_bits = max(1, math.ceil(math.log2(pal_size))) if pal_size else palbits
    for ws, zr, newpal in slices:
        bw.put(zdiv, 3)
        bw.put(len(ws) - 1, 15)
        bw.put(wdiv, 3)
        bw.put(1 if wtrunc else 0, 1)
        bw.put(newpal, 1)
        if newpal:
            bw.put(dirofs, 5)
            bw.put(pal_size - 1 if pal_size else 0, 5)
            bw.put(palbits - 2, 3)
            for p in pal:
                bw.put(p, palbits)
        idx = [index(w) for w in ws]
        unc = wdiv == 7
        if unc:
            assert all(i < (1 << unc_bits) for i in idx), "index does not fit uncompressed bits"
        else:
            assert all((i >> wdiv) <= (2 if wtrunc else 31) for i in idx), "GRC quotient too large"
        wrem = unc_bits if unc else wdiv
        # weight unary slots: list of (b0, b1 or None, completes_item)
        wslots = []
        for ix in idx:
            q = ix >> wdiv if not unc else 0
            if wtrunc:
                assert q <= 2
                wslots.append((0, None, True) if q == 0 else (1, q - 1, True))
            else:
                while q >= 2:
                    wslots.append((1, 1, False))
                    q -= 2
                wslots.append((0, None, True) if q == 0 else (1, 0, True))
        zbits = []
        for z in (zr or []):
            zbits += [1] * (z >> zdiv) + [0]
        zlen = 12 if zdiv < 3 else 8
        w_cnt, z_cnt = len(ws), (len(zr) if alt else 0)
        w_done = z_done = 0
        ws_i = zb_i = 0
        pending_w: list[int] = []
        pending_z: list[int] = []
        per_chunk = 12 if unc_bits <= 5 else 8
        while True:
            bal = w_done - z_done
            w_en = (bal < 8 or not alt) and w_done < w_cnt
            z_en = bal >= 0 and alt and z_done < z_cnt
            new_w: list[int] = []
            new_z: list[int] = []
            if w_en and not unc:
                u0 = u1 = 0
                n1 = 0
                for s in range(12):
                    if w_done + len(new_w) >= w_cnt or ws_i >= len(wslots):
                        break
                    b0, b1, done = wslots[ws_i]
                    ws_i += 1
                    if b0:
                        u0 |= 1 << s
                        u1 |= b1 << n1
                        n1 += 1
                    if done:
                        new_w.append(w_done + len(new_w))
                bw.put(u0, 12)
            if z_en:
                zu = 0
                for s in range(zlen):
                    if z_done + len(new_z) >= z_cnt:
                        break
                    b = zbits[zb_i]
                    zb_i += 1
                    zu |= b << s
                    if b == 0:
                        new_z.append(z_done + len(new_z))
                bw.put(zu, zlen)
            if w_en and not unc:
                bw.put(u1, n1)
            if w_en and unc:
                for _ in range(min(per_chunk, w_cnt - w_done)):
                    new_w.append(w_done + len(new_w))
            for i in pending_w:
                bw.put(idx[i] & ((1 << wrem) - 1) if not unc else idx[i], wrem)
            for i in pending_z:
                bw.put(zr[i] & ((1 << zdiv) - 1), zdiv)
            w_done += len(new_w)
            z_done += len(new_z)
            pending_w, pending_z = new_w, new_z
            if not (w_en or z_en):
                break
    bw.put(7, 3)
    return bw.tobytes()


# ------------------------------------------------------------------------------------------------
# weight ordering ([U85-TRM: §3.9.2], G-W1..G-W6)

@njit(nogil=True, cache=True)
def _block_dims(p):
    """(ifm_block_depth, wblk_k, wblk_i) of the ordering ([U85-TRM: §3.9.2])."""
    partk, dwise, sparse, i16, mb16 = p[10] or p[11], p[11], p[12], p[13], p[17]
    if partk:
        ibd = 16
    elif (not sparse) and mb16:
        ibd = 32
    elif (not sparse) or i16:
        ibd = 64
    else:
        ibd = 128
    if partk:
        wblk_k = 5 if ((not i16) and (not sparse) and (not dwise)) else 10
    else:
        wblk_k = 1
    if dwise:
        wblk_i = 1
    elif partk and i16 and not sparse:
        wblk_i = 8
    else:
        wblk_i = ibd
    return ibd, wblk_k, wblk_i


@njit(nogil=True, cache=True)
def _walk_pad(n, fill, ws_out, idx_out, num_wd, per):
    """The walk's padding: ``per`` padding values (index -1) for each of the num_wd streams
    in turn, from position n; returns the new n. One helper for the depthwise and the
    part-kernel padding of [U85-TRM: §3.9.2]: written out twice in the walk they were ~0.1 s
    more of its compile (issue 31 #5)."""
    for ws in range(num_wd):
        for _k in range(per):
            if fill:
                ws_out[n] = ws
                idx_out[n] = -1
            n += 1
    return n


@njit(nogil=True, cache=True, error_model="numpy")
def _walk(p, fill, ws_out, idx_out):
    """Walk the decoder stream order of [U85-TRM: §3.9.2]; returns the number of emitted values.
    With fill, stores each value's stream number in ws_out and its flat index into
    W[oc][kh_u][kw_u][icn] (or -1 for padding) in idx_out. p: ofm_depth, ifm_depth,
    kernel_h, kernel_w (dilated), dil_y, dil_x (0/1), stride_y, stride_x, ofm_block_depth,
    decomp_size, partkernel, depthwise, sparse, ifm16bit, wblk_o (microblock depth), num_wd,
    dw_pad_k, mb_i16only.

    Why the stepped loops are ``while`` loops and the error model numpy's: numba compiles a
    ``range`` with a variable step and an integer ``//`` each with a raising error path
    (step 0, division by 0); with them (and the padding loops written out twice, now
    :func:`_walk_pad`) it was ~1.4 s of compile CPU, ~25 % more (issue 31 #5). The steps and
    divisors are checked once here instead."""
    ofm_depth, ifm_depth, kh, kw, dy, dx = p[0], p[1], p[2], p[3], p[4], p[5]
    sty, stx, obd, dsz, partk, dwise, sparse = p[6], p[7], p[8], p[9], p[10], p[11], p[12]
    wblk_o, num_wd, dw_pad_k = p[14], p[15], p[16]
    partk = partk or dwise
    ibd, wblk_k, wblk_i = _block_dims(p)
    kw_u = (kw + (1 << dx) - 1) >> dx
    kh_u = (kh + (1 << dy) - 1) >> dy
    dw_ = dsz >> dx
    dh_ = dsz >> dy
    icn = 1 if dwise else ifm_depth
    i_sz = 1 if dwise else (16 if sparse else 8)
    sx_n = stx if partk else 1
    sy_n = sty if partk else 1
    if obd < 1 or wblk_o < 1 or sy_n < 1 or sx_n < 1 or num_wd < 1 or dw_ < 1 or dh_ < 1:
        raise ValueError("weight ordering: a block depth, stride, decoder count or "
                         "decomposition below 1")
    n = 0
    ifm_loop_start = 0
    ifm_loop_end = 1 if dwise else ifm_depth
    inc = -ibd
    oblk_z = 0
    while oblk_z < ofm_depth:
        inc = -inc
        iblk_z = ifm_loop_start
        while 0 <= iblk_z < ifm_loop_end:
            ifm_loop_start = iblk_z
            subk_x = 0
            while subk_x < kw_u:
                subk_y = 0
                while subk_y < kh_u:
                    subk_w = min(kw_u - subk_x, dw_)
                    subk_h = min(kh_u - subk_y, dh_)
                    iblk_depth = 1 if dwise else min(ibd, ifm_depth - iblk_z)
                    wblk_iz = 0
                    while wblk_iz < iblk_depth:
                        oblk_depth = min(obd, ofm_depth - oblk_z)
                        ublk_z = 0
                        while ublk_z < oblk_depth:
                            o0 = oblk_z + ublk_z
                            i0 = iblk_z + wblk_iz
                            cnt = subk_w * subk_h
                            subk_num = (cnt + wblk_k - 1) // wblk_k * wblk_k
                            for sy in range(sy_n):
                                for sx in range(sx_n):
                                    skh = (subk_h + sy_n - 1 - sy) // sy_n
                                    skw = (subk_w + sx_n - 1 - sx) // sx_n
                                    for ky in range(skh):
                                        for kx in range(skw):
                                            x = kx if ky % 2 == 0 else skw - 1 - kx
                                            subk_num -= 1
                                            i = 0
                                            while i < wblk_i:
                                                for o in range(wblk_o):
                                                    ws = (o >> 2) & (num_wd - 1)
                                                    for ii in range(i_sz):
                                                        ifm_z = i0 + i + ii
                                                        ofm_z = o0 + o
                                                        xx = subk_x + sx + x * sx_n
                                                        yy = subk_y + sy + ky * sy_n
                                                        if fill:
                                                            ws_out[n] = ws
                                                            if ofm_z < ofm_depth and ifm_z < icn:
                                                                rw = (ofm_z * kh_u + yy) * kw_u
                                                                idx_out[n] = (rw + xx) * icn + ifm_z
                                                            else:
                                                                idx_out[n] = -1
                                                        n += 1
                                                i += i_sz
                                            if dwise and subk_num % wblk_k == 0:
                                                n = _walk_pad(n, fill, ws_out, idx_out, num_wd,
                                                              dw_pad_k * wblk_o // num_wd)
                            if partk and subk_num > 0:
                                extra = subk_num + (dw_pad_k if dwise else 0)
                                n = _walk_pad(n, fill, ws_out, idx_out, num_wd,
                                              extra * wblk_i * wblk_o // num_wd)
                            ublk_z += wblk_o
                        wblk_iz += wblk_i
                    subk_y += dh_
                subk_x += dw_
            iblk_z += inc
        oblk_z += obd
    return n


def ordering_params(*, ofm_depth, ifm_depth, kernel_hw, dilation=(1, 1), stride=(1, 1),
                    ofm_block_depth, macs_per_cc=256, microblock=2, depthwise=False,
                    part_kernel_first=False, decomposition_d4x4=False, sparse=False,
                    ifm16bit=False) -> np.ndarray:
    """Pack the weight-ordering inputs [U85-TRM: §3.9.2]: OFM/IFM depth, DILATED kernel size
    (KERNEL_*_M1 + 1), dilation 1/2, stride, OFM_BLK_DEPTH_M1 + 1, CONFIG macs_per_cc,
    ACC_FORMAT.microblock, op, KERNEL_STRIDE weight_order/decomposition, sparsity, IFM b16."""
    num_wd, dw8, dw16 = WD_CONFIG[macs_per_cc]
    mbd = microblock_depth(macs_per_cc, microblock)
    mb16 = mbd == 16 and microblock in (0, 1)
    return np.array([ofm_depth, ifm_depth, kernel_hw[0], kernel_hw[1], dilation[0] - 1,
                     dilation[1] - 1, stride[0], stride[1], ofm_block_depth,
                     4 if decomposition_d4x4 else 8, int(part_kernel_first), int(depthwise),
                     int(sparse), int(ifm16bit), mbd, num_wd, dw16 if ifm16bit else dw8,
                     int(mb16)], np.int64)


def _walk_arrays(p):
    """The walk's (stream numbers, indices) for the ordering parameters ``p``, read-only and
    kept for the last parameters: a decode asks twice (expected_counts, unorder_weights)."""
    return _walk_kept(np.asarray(p, np.int64).tobytes())


@functools.lru_cache(maxsize=2)  # (a large layer's arrays are megabytes)
def _walk_kept(key: bytes):
    p = np.frombuffer(key, np.int64).copy()
    dummy = np.zeros(0, np.int64)
    walk = KP.tiered(_walk, 2 * WALK_S_PER_VALUE * math.prod(_wshape(p)), p, False, dummy, dummy)
    n = walk(p, False, dummy, dummy)
    ws = np.zeros(n, np.int64)
    idx = np.zeros(n, np.int64)
    walk(p, True, ws, idx)
    ws.flags.writeable = idx.flags.writeable = False
    return ws, idx


def _wshape(p):
    kh_u = (int(p[2]) + (1 << int(p[4])) - 1) >> int(p[4])
    kw_u = (int(p[3]) + (1 << int(p[5])) - 1) >> int(p[5])
    icn = 1 if p[11] else int(p[1])
    return (int(p[0]), kh_u, kw_u, icn)


def expected_counts(p) -> list[int]:
    """Number of decoded values each weight decoder must produce (wcnt[ws])."""
    ws, _ = _walk_arrays(p)
    return [int(np.count_nonzero(ws == k)) for k in range(int(p[15]))]


def unorder_weights(streams, p, diag=None) -> np.ndarray:
    """Invert the stream order: decoded values of each weight decoder (list, num_wd entries)
    -> int64 W[oc][kh][kw][ic] (undilated; ic axis 1 for depthwise). Checks (diag) that every
    stream has the expected count and that padding positions are 0 (G-W9)."""
    ws, idx = _walk_arrays(p)
    shape = _wshape(p)
    w = np.zeros(int(np.prod(shape)), np.int64)
    for k in range(int(p[15])):
        sel = ws == k
        pos = idx[sel]
        vals = np.asarray(streams[k], np.int64) if k < len(streams) else np.zeros(0, np.int64)
        if diag is not None and vals.size != pos.size:
            diag.append(f"weight decoder {k}: {vals.size} values, expected {pos.size}")
        m = min(vals.size, pos.size)
        pos, vals = pos[:m], vals[:m]
        real = pos >= 0
        w[pos[real]] = vals[real]
        if diag is not None and np.any(vals[~real] != 0):
            diag.append(f"weight decoder {k}: non-zero value in a padding position")
    return w.reshape(shape)


def order_weights(weights, p) -> list[np.ndarray]:
    """Forward order (tests/encoders): W[oc][kh][kw][ic] -> the num_wd decoder value streams."""
    ws, idx = _walk_arrays(p)
    flat = np.asarray(weights, np.int64).reshape(-1)
    vals = np.where(idx >= 0, flat[np.maximum(idx, 0)], 0)
    return [vals[ws == k] for k in range(int(p[15]))]


def _fwd_block(p) -> int:
    """wblk_size = wblk_k*wblk_o*wblk_i/num_wd [U85-TRM: §3.9.2]."""
    _, wblk_k, wblk_i = _block_dims(p)
    return int(wblk_k) * int(p[14]) * int(wblk_i) // int(p[15])


def fwd_merge(streams, p) -> np.ndarray:
    """FWD merge [U85-TRM: §3.9.2]: interleave the num_wd streams in blocks of wblk_size values
    (stream 0 block, stream 1 block, ...), over the length of stream 0."""
    num_wd = int(p[15])
    if num_wd == 1:
        return np.asarray(streams[0], np.int64)
    size = _fwd_block(p)
    parts = [np.asarray(st, np.int64) for st in streams]
    out = []
    for i in range(0, len(parts[0]), size):
        out += [part[i:i + size] for part in parts]
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def fwd_split(values, p) -> list[np.ndarray]:
    """Inverse of fwd_merge: the merged stream back into num_wd decoder streams."""
    num_wd = int(p[15])
    values = np.asarray(values, np.int64)
    if num_wd == 1:
        return [values]
    size = _fwd_block(p)
    blocks = [values[i:i + size] for i in range(0, len(values), size)]
    return [np.concatenate(blocks[k::num_wd]) if blocks[k::num_wd] else np.zeros(0, np.int64)
            for k in range(num_wd)]


def decode_weights(streams, p, fwd=False, diag=None) -> np.ndarray:
    """Decode the weight stream(s) of one CONV/DEPTHWISE into W[oc][kh][kw][ic]: ``streams`` is
    a list of byte strings (decoder 0..num_wd-1 for SWD; one stream for FWD). Sparse weights
    are checked against the 2:4 rule here, so the memo keeps that verdict with them."""
    counts = expected_counts(p)
    if fwd:
        dec = fwd_split(decode_fwd(streams[0], sum(counts)), p)
    else:
        dec = []
        for k, s in enumerate(streams[:len(counts)]):
            v, status, _ = decode_swd(s)
            if status != SWD_OK and diag is not None:
                diag.append(f"weight decoder {k}: SWD status {status}")
            dec.append(v)
    w = unorder_weights(dec, p, diag)
    if p[12]:  # sparse
        check_sparse_2_4(w, diag)
    return w


def check_sparse_2_4(w: np.ndarray, diag: list | None) -> None:
    """The rules a sparse_2_4 weight stream must keep [U85-TRM: Table 3-157]: values -127..+127 and
    at least two zeros in every group of four input channels (ic 4k..4k+3 at one oc, ky, kx; a last
    partial group counts its missing channels as zeros).

    Why this is all there is to sparse_2_4: the seed gives only its ordering (i_sz 16 and
    ifm_block_depth 128 for 8-bit IFMs, [U85-TRM: §3.9.2], which :func:`_walk` follows) and
    says the hardware skips the zero products [U85-TRM: §2.5]. Vela's public encoder (regor's
    EthosU85WeightEncoder, Vela 5.2) writes every weight, zeros included, in that order through
    the ordinary SWD/FWD encoder, and only checks the 2:4 rule (its SparsityTracker); so a
    decoded sparse stream is an ordinary W[oc][ky][kx][ic] and the convolution is unchanged.
    A violated rule is UNPREDICTABLE (reported in diag)."""
    if diag is None or w.size == 0:
        return
    if np.abs(w).max() > 127:
        diag.append("sparse_2_4 weight outside -127..+127 [U85-TRM: Table 3-157]")
    ic = w.shape[-1]
    pad = (-ic) % 4
    nz = np.pad(w != 0, [(0, 0)] * (w.ndim - 1) + [(0, pad)])
    groups = nz.reshape(w.shape[:-1] + (-1, 4)).sum(axis=-1)
    if np.any(groups > 2):
        diag.append("sparse_2_4: more than 2 non-zero weights in a group of 4 input channels "
                    "[U85-TRM: Table 3-157]")


_DECODED: OrderedDict = OrderedDict()  # (stream bytes, params, fwd) -> (read-only W, diag, bytes)
_PROBES: dict = {}  # (stream lengths and ends, params, fwd) -> an entry of _DECODED
#: bounds: entries well above a network's weighted operations (each inference uses every one,
#: so fewer entries than operations evict each before its next use: MobileNet v2 0.35 with 61
#: took 59 ms instead of 19 ms per inference with room for 32), bytes bound the memory
_DECODED_MAX_ENTRIES = 1024
_DECODED_MAX_BYTES = 64 << 20


def decode_weights_memo(streams, p, fwd: bool = False, diag: list | None = None) -> np.ndarray:
    """:func:`decode_weights` memoised on the exact stream bytes and ordering parameters.

    Why: a program reruns the same layers (every inference, every ``monitor reset init``) and
    decoding is a pure function of the bytes, so the decoder's milliseconds need not be paid
    again. The key is the full content (not an address), so a changed stream decodes afresh.
    Returns a read-only array; the diag messages of the decode are replayed on every hit.
    Bounded to 1024 entries / 64 MiB of stream bytes (least recently used out). The last call's
    entry for the same stream ends and parameters is tried first, taken when the bytes are
    equal: a compare instead of hashing every byte (12 us for a 48 KB stream)."""
    data = tuple(bytes(st) for st in streams)
    params = np.asarray(p, np.int64).tobytes()
    probe = (tuple((len(b), b[:64], b[-64:]) for b in data), params, bool(fwd))
    hit = _PROBES.get(probe)
    if hit is None or hit[2] != data:
        key = (data, params, bool(fwd))
        hit = _DECODED.get(key)
        if hit is None:
            msgs: list[str] = []
            w = decode_weights(streams, p, fwd=fwd, diag=msgs)
            w.flags.writeable = False
            hit = (w, tuple(msgs), data)
            _DECODED[key] = hit
            total = sum(sum(len(b) for b in k[0]) for k in _DECODED)
            while len(_DECODED) > 1 and (len(_DECODED) > _DECODED_MAX_ENTRIES
                                         or total > _DECODED_MAX_BYTES):
                old, _ = _DECODED.popitem(last=False)
                total -= sum(len(b) for b in old[0])
                _PROBES.clear()  # it holds only entries of _DECODED
        _PROBES[probe] = hit
    _DECODED.move_to_end((hit[2], params, bool(fwd)))  # least recently used goes first
    if diag is not None:
        diag.extend(hit[1])
    return hit[0]


# ------------------------------------------------------------------------------------------------
# scale and bias stream ([U85-TRM: §3.7])

def decode_scale_stream(stream, depth: int, acc48: bool = False, set_size: int = 16,
                        reverse_c: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parse 10-byte records (LSB first, [U85-TRM: §3.7.3]): i32 bias:32 scale:31 res:1 shift:6
    res:10; i48 bias:48 scale:15 res:1 shift:6 res:10. Records come in sets of ``set_size``
    (channels_in_set) in OFM channel order, the sets reversed for OFM reverse C [U85-TRM: §3.7.2].
    Bias is two's complement (G-R2). Returns int64 (bias, scale, shift) of length ``depth``,
    read-only: memoised on the bytes and the parameters (a layer decodes the same stream on
    every run, ~70 us for 64 channels)."""
    return _scale_stream_memo(bytes(stream), int(depth), bool(acc48), int(set_size),
                              bool(reverse_c))


@functools.lru_cache(maxsize=1024)  # as many as _DECODED_MAX_ENTRIES, for the same reason
def _scale_stream_memo(b: bytes, depth: int, acc48: bool, set_size: int,
                       reverse_c: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bias = np.zeros(depth, np.int64)
    scale = np.zeros(depth, np.int64)
    shift = np.zeros(depth, np.int64)
    nsets = (depth + set_size - 1) // set_size
    for k in range(nsets * set_size):
        s, j = divmod(k, set_size)
        base = (nsets - 1 - s) * set_size if reverse_c else s * set_size
        oc = base + j
        rec = b[10 * k:10 * k + 10]
        if oc >= depth or len(rec) < 10:
            continue
        r = int.from_bytes(rec, "little")
        if acc48:
            bv, sc, sh = r & ((1 << 48) - 1), (r >> 48) & 0x7FFF, (r >> 64) & 63
            bv = bv - (1 << 48) if bv >> 47 else bv
        else:
            bv, sc, sh = r & 0xFFFFFFFF, (r >> 32) & 0x7FFFFFFF, (r >> 64) & 63
            bv = bv - (1 << 32) if bv >> 31 else bv
        bias[oc], scale[oc], shift[oc] = bv, sc, sh
    for a in (bias, scale, shift):
        a.flags.writeable = False
    return bias, scale, shift


def encode_scale_stream(bias, scale, shift, acc48: bool = False, set_size: int = 16,
                        reverse_c: bool = False) -> bytes:
    """Build a scale/bias stream (tests): whole sets, unused records zero [U85-TRM: §3.7.3]."""
    depth = len(bias)
    nsets = (depth + set_size - 1) // set_size
    recs = []
    for s in range(nsets):
        base = (nsets - 1 - s) * set_size if reverse_c else s * set_size
        for j in range(set_size):
            oc = base + j
            if oc >= depth:
                recs.append(bytes(10))
                continue
            if acc48:
                v = ((int(bias[oc]) & ((1 << 48) - 1)) | (int(scale[oc]) & 0x7FFF) << 48
                     | (int(shift[oc]) & 63) << 64)
            else:
                v = ((int(bias[oc]) & 0xFFFFFFFF) | (int(scale[oc]) & 0x7FFFFFFF) << 32
                     | (int(shift[oc]) & 63) << 64)
            recs.append(v.to_bytes(10, "little"))
    return b"".join(recs)

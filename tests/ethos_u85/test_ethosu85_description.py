"""The Ethos-U85 description (configs/ethos-u85.toml) against checkable facts
(numbered "#n" as in the project's notes, each with its TRM citation); "[U85-TRM: ...]" cites
the TRM."""
from __future__ import annotations

import pytest

from accelstub.devices.description import Description, Field, Register, load_description
from tests.helpers import source_docs

NPU = 0x5000_4000  # host_map base (IMPLEMENTATION SPECIFIC, [U85-TRM: §3.2]; [U85-TRM: Table 3-1])


@pytest.fixture(scope="module")
def desc() -> Description:
    return load_description("ethos-u85")


def reg(desc: Description, name: str) -> Register:
    return desc.register(name)


def fld(desc: Description, reg_name: str, field: str) -> Field:
    for f in desc.register(reg_name).fields:
        if f.name == field:
            return f
    raise AssertionError(f"{reg_name} has no field {field}")


def bits(desc: Description, reg_name: str, field: str) -> tuple[int, int]:
    f = fld(desc, reg_name, field)
    return f.msb, f.lsb


def off(desc: Description, name: str) -> int:
    return reg(desc, name).address - NPU


# ---------------------------------------------------------------------------------------------
# device, counts, regions

def test_device_identity(desc):
    assert desc.name == "ethos-u85"
    assert desc.cpu_name == "ethos-u85.npu"


def test_register_count_71_trm_registers_as_84_words_plus_8_emu(desc):
    """71 TRM registers (24 BASE, 8 BASEP, 12 ID, 11 PMU, 16 PMU_COUNTERS; [U85-TRM: §3.3]); the 13
    64-bit ones (QBASE, 3 CFG hashes, BASEP0-7, PMCCNTR) are split into _LO/_HI words."""
    arch = [r for r in desc.registers if r.block != "emu"]
    assert len(arch) == 84
    per_block = {}
    for r in arch:
        per_block[r.block] = per_block.get(r.block, 0) + 1
    assert per_block == {"base": 24 + 4, "base_pointers": 16, "id": 12, "pmu": 11 + 1,
                         "pmu_counters": 16}
    halves = {r.name[:-3] for r in arch if r.name.endswith(("_LO", "_HI"))}
    assert len(halves) == 13
    trm = len(arch) - len(halves)
    assert trm == 71
    assert len([r for r in desc.registers if r.block == "emu"]) == 8


def test_pages_and_window(desc):
    """host_map: BASE 0x0000, BASE_POINTERS 0x0080, ID 0x0F00, PMU 0x1180, PMU_COUNTERS 0x1300 in
    an 8 KiB window ([U85-TRM: Table 3-1], PADDR[12:0] [U85-TRM: Table 5-14])."""
    bases = {b.name: b.base - NPU for b in desc.blocks}
    assert bases["base"] == 0x0000 and bases["base_pointers"] == 0x0080
    assert bases["id"] == 0x0F00 and bases["pmu"] == 0x1180 and bases["pmu_counters"] == 0x1300
    (win,) = [r for r in desc.regions if r.name == "npu_regs"]
    assert win.kind == "registers" and win.base == NPU and win.size == 0x2000


def test_memory_windows_and_emu(desc):
    rg = {r.name: r for r in desc.regions}
    assert rg["sram"].kind == "ram" and rg["sram"].base == 0x1000_0000
    assert rg["sram"].size == 4 << 20
    assert rg["dram"].kind == "ram" and rg["dram"].base == 0x6000_0000
    assert rg["dram"].size == 32 << 20
    assert rg["emu"].kind == "pseudo" and rg["emu"].base == 0xF000_0000
    emu = [r.name for r in desc.registers if r.block == "emu"]
    assert emu == ["EMU_STATE", "EMU_PC", "EMU_UNIT", "EMU_UNITS", "EMU_CYCLES_LO", "EMU_CYCLES_HI",
                   "EMU_THROTTLE_US", "EMU_END"]


def test_reserved_offsets_are_not_populated(desc):
    """#25: 0x002C and 0x0034 are reserved (no U55 LOCK register) [U85-TRM: Table 3-3]."""
    (win,) = [r for r in desc.regions if r.name == "npu_regs"]

    def populated(o):
        return any(s <= NPU + o < e for s, e in win.populated)
    for o in (0x2C, 0x34, 0x58, 0x5C, 0xC0, 0x100, 0x180, 0xFCC, 0x119C, 0x11B4, 0x1320, 0x13A0):
        assert not populated(o), hex(o)
        assert desc.register_at(NPU + o) is None
    for o in (0x0, 0x30, 0x38, 0x7C, 0xBC, 0xFD0, 0xFFC, 0x1180, 0x11B0, 0x131C, 0x139C):
        assert populated(o), hex(o)


def test_every_field_documented_with_a_trm_citation_in_the_description_file(desc):
    """Provenance stays in configs/ethos-u85.toml; users see the text without citations."""
    src = source_docs("ethos-u85")
    for r in desc.registers:
        if r.block == "emu":
            continue
        doc, fields = src[r.definition.name]
        assert "[U85-TRM: " in doc and r.doc, r.name
        for f in r.fields:
            assert f.doc and "[U85-TRM: " in fields[f.name], (r.name, f.name)
            assert "[U85-TRM" not in f.doc, (r.name, f.name, f.doc)


# ---------------------------------------------------------------------------------------------
# ID and CONFIG reset values

def test_id_reset_and_fields(desc):
    """#1-#3: ID at 0x0000, ro, reset 0x20007001; product_major [15:12] = 7, arch_major_rev
    [31:28] = 2, version_status [3:0] = 1 [U85-TRM: Table 3-3, §3.3.1.1, Table 3-4]."""
    r = reg(desc, "ID")
    assert off(desc, "ID") == 0x0000 and r.reset == 0x2000_7001
    assert all(f.access == "ro" for f in r.fields)
    assert bits(desc, "ID", "product_major") == (15, 12)
    assert fld(desc, "ID", "product_major").reset == 7
    assert bits(desc, "ID", "arch_major_rev") == (31, 28)
    assert fld(desc, "ID", "arch_major_rev").reset == 2
    assert bits(desc, "ID", "version_status") == (3, 0)
    assert fld(desc, "ID", "version_status").reset == 1


def test_config_reset_is_ethosu85_256(desc):
    """#22-#24: CONFIG at 0x0028, macs_per_cc [3:0] log2 (256 -> 8), cmd_stream_version [7:4] = 1,
    product [31:28] = 2, num_axi_sram [9:8], num_wd [13:12] [U85-TRM: Table 3-13].
    U§1.2: ETHOSU85_256 resets to 0x20000118."""
    r = reg(desc, "CONFIG")
    assert off(desc, "CONFIG") == 0x28 and r.reset == 0x2000_0118
    assert bits(desc, "CONFIG", "macs_per_cc") == (3, 0)
    assert fld(desc, "CONFIG", "macs_per_cc").enum_name(11) == "ETHOSU85_2048"
    assert bits(desc, "CONFIG", "cmd_stream_version") == (7, 4)
    assert bits(desc, "CONFIG", "num_axi_sram") == (9, 8)
    assert bits(desc, "CONFIG", "num_axi_ext") == (10, 10)
    assert bits(desc, "CONFIG", "num_wd") == (13, 12)
    assert bits(desc, "CONFIG", "custom_dma") == (27, 27)
    assert bits(desc, "CONFIG", "product") == (31, 28) and fld(desc, "CONFIG", "product").reset == 2
    assert all(f.access == "ro" for f in r.fields)


# ---------------------------------------------------------------------------------------------
# BASE page facts

def test_status_bits(desc):
    """#4-#11: STATUS 0x0004: state bit 0 (stopped/running), irq_raised 1, bus_status 2,
    reset_status 3 (reset 1), cmd_parse_error 4, cmd_end_reached 5, pmu_irq_raised 6, ecc_fault 8,
    branch_fault 9, faulting_interface 11, faulting_channel [15:12] (8 = wr_ofm),
    irq_history_mask [31:16] [U85-TRM: Table 3-3, Table 3-5]."""
    assert off(desc, "STATUS") == 0x04
    s = reg(desc, "STATUS")
    assert s.reset == 0x8 and all(f.access == "ro" for f in s.fields)
    expect = {"state": (0, 0), "irq_raised": (1, 1), "bus_status": (2, 2), "reset_status": (3, 3),
              "cmd_parse_error": (4, 4), "cmd_end_reached": (5, 5), "pmu_irq_raised": (6, 6),
              "ecc_fault": (8, 8), "branch_fault": (9, 9), "faulting_interface": (11, 11),
              "faulting_channel": (15, 12), "irq_history_mask": (31, 16)}
    for name, b in expect.items():
        assert bits(desc, "STATUS", name) == b, name
    assert fld(desc, "STATUS", "state").enum_name(1) == "running"
    assert fld(desc, "STATUS", "faulting_channel").enum_name(8) == "wr_ofm"
    assert fld(desc, "STATUS", "faulting_interface").enum_name(1) == "ext"


def test_cmd(desc):
    """#12-#15: CMD at 0x0008, rw, reset 0x0000000C: RS bit 0, clear_irq 1, clock_q_enable 2 and
    power_q_enable 3 reset to 1, stop_request 4, clear_irq_history [31:16]
    [U85-TRM: Table 3-3, Table 3-6]."""
    r = reg(desc, "CMD")
    assert off(desc, "CMD") == 0x08 and r.reset == 0xC
    # reads back the last written value [U85-TRM: §3.3.1.3]
    assert all(f.access == "rw" for f in r.fields)
    assert bits(desc, "CMD", "transition_to_running_state") == (0, 0)
    assert bits(desc, "CMD", "clear_irq") == (1, 1)
    assert bits(desc, "CMD", "stop_request") == (4, 4)
    assert bits(desc, "CMD", "clear_irq_history") == (31, 16)


def test_queue_registers(desc):
    """#16-#20: RESET 0x000C; QBASE 0x0010-0x0014 (bits [39:0]); QREAD 0x0018 ro; QCONFIG 0x001C
    cmd_region0 [1:0]; QSIZE 0x0020
    [U85-TRM: Table 3-3, Table 3-8, Table 3-9, Table 3-10, Table 3-11]."""
    assert off(desc, "RESET") == 0x0C and reg(desc, "RESET").reset == 0
    assert off(desc, "QBASE_LO") == 0x10 and off(desc, "QBASE_HI") == 0x14
    assert bits(desc, "QBASE_HI", "offset_hi") == (7, 0)  # address bits [39:32]
    assert off(desc, "QREAD") == 0x18 and reg(desc, "QREAD").fields[0].access == "ro"
    assert off(desc, "QCONFIG") == 0x1C and bits(desc, "QCONFIG", "cmd_region0") == (1, 0)
    assert off(desc, "QSIZE") == 0x20 and bits(desc, "QSIZE", "QSIZE") == (31, 0)


def test_prot_cond_status_power_ctrl(desc):
    """#21, #26, #27: PROT 0x0024 ro reset 0; COND_STATUS 0x0030 result_flag bit 0; POWER_CTRL
    0x0038 mac_step_cycles [5:0] [U85-TRM: Table 3-3, Table 3-14, Table 3-15]."""
    assert off(desc, "PROT") == 0x24 and reg(desc, "PROT").reset == 0
    assert all(f.access == "ro" for f in reg(desc, "PROT").fields)
    assert off(desc, "COND_STATUS") == 0x30 and bits(desc, "COND_STATUS", "result_flag") == (0, 0)
    assert off(desc, "POWER_CTRL") == 0x38
    assert bits(desc, "POWER_CTRL", "mac_step_cycles") == (5, 0)


def test_regioncfg_and_mem_attr(desc):
    """#28-#29: REGIONCFG 0x003C region n at [2n+1:2n]; MEM_ATTR0-3 at 0x40-0x4C with axi_port
    bit 2 and memtype [7:4], 11 = write_back_read_and_write_allocate
    ([U85-TRM: Table 3-3, Table 3-16], [U85-TRM: Table 3-17])."""
    assert off(desc, "REGIONCFG") == 0x3C
    for n in range(8):
        assert bits(desc, "REGIONCFG", f"region{n}") == (2 * n + 1, 2 * n)
    for n in range(4):
        assert off(desc, f"MEM_ATTR{n}") == 0x40 + 4 * n
        assert bits(desc, f"MEM_ATTR{n}", "axi_port") == (2, 2)
        assert bits(desc, f"MEM_ATTR{n}", "memtype") == (7, 4)
        assert bits(desc, f"MEM_ATTR{n}", "mem_domain") == (1, 0)
    assert fld(desc, "MEM_ATTR0", "memtype").enum_name(11) == "write_back_read_and_write_allocate"


def test_axi_limits(desc):
    """#30: AXI_SRAM 0x0050 / AXI_EXT 0x0054: max_read [5:0], max_write [12:8], max_beats [17:16]
    with 2 = B256 [U85-TRM: Table 3-3, Table 3-22]."""
    for name, o in (("AXI_SRAM", 0x50), ("AXI_EXT", 0x54)):
        assert off(desc, name) == o and reg(desc, name).reset == 0
        assert bits(desc, name, "max_outstanding_read_m1") == (5, 0)
        assert bits(desc, name, "max_outstanding_write_m1") == (12, 8)
        assert bits(desc, name, "max_beats") == (17, 16)
        assert fld(desc, name, "max_beats").enum_name(2) == "B256"


def test_cfg_pin_mirrors(desc):
    """#33: CFG_SRAM_HASH0 at 0x0068 (64-bit, ro), hash bits [39:6], bits [5:0] zero
    ([U85-TRM: Table 3-3], [U85-TRM: Table 3-27]); CAP registers at 0x60/0x64
    [U85-TRM: Table 3-3]."""
    assert off(desc, "CFG_SRAM_CAP") == 0x60 and off(desc, "CFG_EXT_CAP") == 0x64
    assert off(desc, "CFG_SRAM_HASH0_LO") == 0x68 and off(desc, "CFG_SRAM_HASH0_HI") == 0x6C
    assert off(desc, "CFG_SRAM_HASH1_LO") == 0x70 and off(desc, "CFG_EXT_HASH0_HI") == 0x7C
    assert bits(desc, "CFG_SRAM_HASH0_LO", "zero") == (5, 0)
    assert bits(desc, "CFG_SRAM_HASH0_LO", "hash_lo") == (31, 6)
    assert bits(desc, "CFG_SRAM_HASH0_HI", "hash_hi") == (7, 0)
    for name in ("CFG_SRAM_CAP", "CFG_EXT_CAP", "CFG_SRAM_HASH0_LO", "CFG_SRAM_HASH1_HI"):
        assert all(f.access == "ro" for f in reg(desc, name).fields)
    # modelled pins: 2 SRAM ports with 64-byte trivial striping [U85-TRM: Table 2-1], HASH1 = 0
    # [U85-TRM: §2.3.3]
    assert reg(desc, "CFG_SRAM_HASH0_LO").reset == 0x40
    assert reg(desc, "CFG_SRAM_HASH1_LO").reset == 0


def test_base_pointers(desc):
    """#34: BASEP0-7 at 0x0080, 64-bit, rw, reset 0, [39:0] used
    [U85-TRM: Table 3-1, Table 3-30, Table 3-31]."""
    for n in range(8):
        lo, hi = reg(desc, f"BASEP{n}_LO"), reg(desc, f"BASEP{n}_HI")
        assert lo.address - NPU == 0x80 + 8 * n and hi.address == lo.address + 4
        assert lo.reset == 0 and hi.reset == 0
        assert bits(desc, f"BASEP{n}_LO", "offset_lo") == (31, 0)
        assert bits(desc, f"BASEP{n}_HI", "offset_hi") == (7, 0)
        assert lo.fields[0].access == "rw"


# ---------------------------------------------------------------------------------------------
# ID page

def test_id_page(desc):
    """#35-#36: PID0 (0xFE0) 0x82, PID1 0xB5, PID2 0x0B, PID4 (0xFD0) 0x04; CID0-3 0x0D, 0xF0, 0x05,
    0xB1 at 0xFF0-0xFFC [U85-TRM: Table 3-32]."""
    expect = {"PID4": (0xFD0, 0x04), "PID5": (0xFD4, 0), "PID6": (0xFD8, 0), "PID7": (0xFDC, 0),
              "PID0": (0xFE0, 0x82), "PID1": (0xFE4, 0xB5), "PID2": (0xFE8, 0x0B),
              "PID3": (0xFEC, 0), "CID0": (0xFF0, 0x0D), "CID1": (0xFF4, 0xF0),
              "CID2": (0xFF8, 0x05), "CID3": (0xFFC, 0xB1)}
    for name, (o, v) in expect.items():
        assert off(desc, name) == o and reg(desc, name).reset == v, name
        assert reg(desc, name).fields[0].access == "ro"
    # component ID 0xB105F00D, part number 0x582 [D]
    cid = sum(reg(desc, f"CID{i}").reset << (8 * i) for i in range(4))
    assert cid == 0xB105_F00D
    assert reg(desc, "PID0").reset | (reg(desc, "PID1").reset & 0xF) << 8 == 0x582


# ---------------------------------------------------------------------------------------------
# PMU

def test_pmcr(desc):
    """#37: PMU page at 0x1180; PMCR.num_event_cnt [15:11] = 8, ro [U85-TRM: Table 3-1, Table 3-46];
    cnt_en bit 0, event_cnt_rst / cycle_cnt_rst write-only [U85-TRM: Table 3-46]."""
    r = reg(desc, "PMCR")
    assert off(desc, "PMCR") == 0x1180 and r.reset == 0x4000
    nc = fld(desc, "PMCR", "num_event_cnt")
    assert (nc.msb, nc.lsb, nc.access, nc.reset) == (15, 11, "ro", 8)
    assert fld(desc, "PMCR", "event_cnt_rst").access == "wo"
    assert fld(desc, "PMCR", "cycle_cnt_rst").access == "wo"
    assert bits(desc, "PMCR", "cnt_en") == (0, 0)


def test_pmu_set_clear_pairs(desc):
    """#39: PMCNTENSET bit 31 enables the cycle counter, bits 0-7 PMEVCNTR0-7 [U85-TRM: Table 3-47];
    the SET/CLR pairs at 0x1184-0x1198 ([U85-TRM: Table 3-45], summary spelling PMOVSET/PMOVCLR as
    aliases)."""
    pairs = [("PMCNTENSET", "PMCNTENCLR", 0x1184, ""), ("PMOVSSET", "PMOVSCLR", 0x118C, "_OVF"),
             ("PMINTSET", "PMINTCLR", 0x1194, "_INT")]
    for s, c, o, suffix in pairs:
        assert off(desc, s) == o and off(desc, c) == o + 4
        assert bits(desc, s, f"CYCLE_CNT{suffix}") == (31, 31)
        for n in range(8):
            assert bits(desc, s, f"EVENT_CNT_{n}{suffix}") == (n, n)
        assert {f.access for f in reg(desc, s).fields} == {"w1s"}
        assert {f.access for f in reg(desc, c).fields} == {"w1c"}
    assert desc.register("PMOVSET") is desc.register("PMOVSSET")
    assert desc.register("PMOVCLR") is desc.register("PMOVSCLR")


def test_pmccntr_is_48_bits(desc):
    """#38: PMCCNTR at PMU+0x20 is 48 bits [47:0] [U85-TRM: Table 3-45, Table 3-53]."""
    assert off(desc, "PMCCNTR_LO") == 0x11A0 and off(desc, "PMCCNTR_HI") == 0x11A4
    assert bits(desc, "PMCCNTR_LO", "CYCLE_CNT_lo") == (31, 0)
    assert bits(desc, "PMCCNTR_HI", "CYCLE_CNT_hi") == (15, 0)


def test_pmccntr_cfg_axi_chan_lut(desc):
    """#40-#42: PMCCNTR_CFG START [9:0], STOP [25:16] [U85-TRM: Table 3-54]; PMCAXI_CHAN CH_SEL
    [3:0], AXI_SEL bit 8, BW_CH_SEL_EN bit 10 [U85-TRM: Table 3-57]; PMCLUT PMC_LUT_0 [31:16]
    [U85-TRM: Table 3-58]."""
    assert off(desc, "PMCCNTR_CFG") == 0x11A8
    assert bits(desc, "PMCCNTR_CFG", "CYCLE_CNT_CFG_START") == (9, 0)
    assert bits(desc, "PMCCNTR_CFG", "CYCLE_CNT_CFG_STOP") == (25, 16)
    assert bits(desc, "PMCCNTR_CFG", "S3") == (15, 15)
    assert bits(desc, "PMCCNTR_CFG", "E0") == (28, 28)
    assert off(desc, "PMCAXI_CHAN") == 0x11AC and desc.register("PMCXI_CHAN").name == "PMCAXI_CHAN"
    assert bits(desc, "PMCAXI_CHAN", "CH_SEL") == (3, 0)
    assert bits(desc, "PMCAXI_CHAN", "AXI_SEL") == (8, 8)
    assert bits(desc, "PMCAXI_CHAN", "BW_CH_SEL_EN") == (10, 10)
    assert off(desc, "PMCLUT") == 0x11B0 and bits(desc, "PMCLUT", "PMC_LUT_0") == (31, 16)
    assert bits(desc, "PMCLUT", "PCM_LUT_EN_0") == (0, 0)


def test_pmu_counters_page(desc):
    """#43: PMEVCNTRn at 0x1300+4n, PMEVTYPERn at 0x1380+4n [U85-TRM: Table 3-1, Table 3-59];
    EV_TYPE [9:0], D0-D3 bits 12-15 [U85-TRM: Table 3-68]."""
    for n in range(8):
        assert off(desc, f"PMEVCNTR{n}") == 0x1300 + 4 * n
        assert off(desc, f"PMEVTYPER{n}") == 0x1380 + 4 * n
        assert bits(desc, f"PMEVTYPER{n}", "EV_TYPE") == (9, 0)
        assert bits(desc, f"PMEVTYPER{n}", "D3") == (15, 15)


def test_pmu_event_codes(desc):
    """#44-#45: 17 cycle, 32 npu_idle, 35 npu_active, 48 mac_active, 81 wd_stalled, 384
    ext_rd_trans_accepted, 640 ext0_rd_trans_accepted, 572 sram3_enabled_cycles, 166
    axi_latency_1024 [U85-TRM: Table 3-69]; 110 codes incl. no_event
    [U85-TRM: Table 3-69]."""
    ev = fld(desc, "PMEVTYPER0", "EV_TYPE")
    expect = {0: "no_event", 17: "cycle", 32: "npu_idle", 35: "npu_active", 48: "mac_active",
              81: "wd_stalled", 384: "ext_rd_trans_accepted", 640: "ext0_rd_trans_accepted",
              572: "sram3_enabled_cycles", 166: "axi_latency_1024", 181: "ecc_ao_lut",
              671: "ext1_wr_stall_limit"}
    for code, name in expect.items():
        assert ev.enum_name(code) == name, code
    assert ev.enum_name(1) is None and ev.enum_name(133) is None and ev.enum_name(672) is None
    assert len(ev.enums) == 110
    assert fld(desc, "PMCCNTR_CFG", "CYCLE_CNT_CFG_STOP").enums == ev.enums

"""Import the project directory that ai8x-synthesis' ai8xize.py generates for MAX78000
(cnn.c, cnn.h, weights.h, main.c, sampledata.h, sampleoutput.h) into a :class:`Max78000Program`.

A small, strict interpreter of the statement forms the generator emits -- not a C compiler.
main() is followed call by call from its start to ``if (check_output() != CNN_OK) fail();``:

* register and memory stores ``*((volatile uint32_t *) 0xADDR) = EXPR;`` (also ``uint8_t`` /
  ``uint16_t``, and ``|=`` / ``&=``, applied as read-modify-write on the device);
* ``memcpy32(dst, array, n)``, ``memcpy_8to32(dst, array, sizeof(uint8_t) * n)`` (one byte per
  32-bit word), ``memcpy_96to128(dst, array, n)`` (3 words then the "Execute write" 0), on the
  arrays that ``static const uint32_t name[] = MACRO;`` binds to the headers' ``#define MACRO
  { ... }`` records (KERNELS, KERNELS_n, BIAS_n, SAMPLE_INPUT_n, SAMPLE_OUTPUT);
* the KERNELS record loop of cnn_load_weights (``addr, len, words...`` records ended by 0, with
  or without the mexpress "Set address" byte write), the SAMPLE_OUTPUT block loop of
  check_output (``addr, mask, len, values...``) or its older one-``if``-per-word form;
* calls of the generated functions (cnn_enable, cnn_init, cnn_load_weights, cnn_load_bias,
  cnn_configure, load_input, cnn_start, cnn_continue), the wait for the interrupt and the
  one-shot ``for`` loop of cnn_continue calls;
* the flows of ai8xize.py's options: ``--energy`` (cnn_disable() before cnn_enable(), the
  weights and input loaded in unbraced 100-fold loops, then a braced loop of inferences:
  ``for (i = 0; i < N; i++) { [load_input();] cnn_start(); [load_input();] <wait> }``, run N
  times), ``--zero-sram`` (cnn_init() runs the BIST of every memory: register polls
  ``while ((*A & M) != V);`` and checks ``if ((*A & M) != V) return CNN_FAIL;``, main() calls
  ``if (cnn_init() != CNN_OK) fail();``) and ``--stop-start`` (``cnn_stop(); cnn_continue();``
  after cnn_start());
* SDK calls outside the accelerator (MXC_GCFR / MXC_GCR clock and power registers,
  MXC_SYS_*, MXC_NVIC_SetVector, timers, cache, delays, printf) are recognised and skipped.

RISC-V projects (``ai8xize.py --riscv``: main.c, main_riscv.c, Makefile.RISCV): the Arm core's
main.c only sets the RISC-V boot address, enables its clock and sleeps; main_riscv.c drives the
accelerator with the same cnn.c. The program is then main_riscv.c's main() (its ISR is
``CNN_IRQHandler``, its wait ``asm volatile("wfi")``, its end the semaphore signal to the Arm
core); main.c is checked to contain nothing but that boot sequence.

Anything else -- a statement form, an SDK call, a header record that is missing or malformed --
raises :class:`Ai8xImportError` naming the file and the line.

The generated helpers (memcpy32, memcpy_8to32, memcpy_96to128) are checked to have the bodies
the generator writes before their meaning is assumed.
"""
from __future__ import annotations

import ast
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..c_source import strip_comments
from ..files import read_program_text
from ..host import Check, CheckResult, CheckWords, HostProgram, Poll, Step, WaitIrq, Write

MASK32 = 0xFFFF_FFFF
FILES = ("cnn.c", "main.c")
RISCV_MAIN = "main_riscv.c"  # present in --riscv projects: the RISC-V core runs the network
HEADERS = ("weights.h", "sampledata.h", "sampleoutput.h", "cnn.h")
#: largest file of a project read: the biggest weights.h (the 442 KB of kernel memory written as
#: C words, ~3 characters per byte) and an unrolled cnn.c are a few MB
MAX_SOURCE = 64 << 20


def _read(path: Path) -> str:
    """A file of the project (regular files only, at most MAX_SOURCE bytes)."""
    return read_program_text(path, MAX_SOURCE, "a file of an ai8x-synthesis project")


class Ai8xImportError(ValueError):
    """A file of the project cannot be imported; the message starts with ``file:line:``."""


@dataclass
class Max78000Program:
    """What the stub holds of an ai8x project: bus accesses in driver order, the known answer."""

    path: Path
    setup: list[Step] = field(default_factory=list)  # cnn_enable .. load_input
    start: list[Write] = field(default_factory=list)  # cnn_start (the master enable is last)
    isr: list[Write] = field(default_factory=list)  # CNN_ISR, applied after each completion
    resume: list[Write] = field(default_factory=list)  # cnn_continue (one-shot)
    continues: int = 0  # how often main() calls cnn_continue after the first completion
    repeats: int = 1  # inferences of main()'s loop (--energy)
    reload: list[Write] = field(default_factory=list)  # the loop's load_input before cnn_start
    expected: list[tuple[int, int, int]] = field(default_factory=list)  # (addr, value, mask)
    layers: int | None = None  # LCNT_MAX + 1 as written by cnn_init
    name: str = ""
    wait_where: str = ""  # file:line of main()'s wait for the CNN
    check_where: str = ""  # file:line of main()'s check_output() call

    def host_program(self) -> HostProgram:
        """main() as the driver runs it: setup and start writes, the wait for the CNN interrupt
        (CNN_ISR runs when it rises), cnn_continue and the wait again for each one-shot layer,
        then check_output against the known answer."""
        wait = WaitIrq("CNN", self.wait_where)
        steps = [*self.setup, *self.start, wait]
        for _ in range(self.repeats - 1):
            steps += [*self.reload, *self.start, wait]
        for _ in range(self.continues):
            steps += [*self.resume, wait]
        steps.append(CheckWords(self.expected, self.check_where))
        total = ((self.layers or 0) if not self.continues else self.continues + 1) * self.repeats
        return HostProgram(self.name, steps, {"CNN": list(self.isr)}, self.summary(),
                           total or None)

    def writes(self) -> list[tuple[int, bytes]]:
        """The plain stores of setup + start as (address, bytes)."""
        return [(a.address, a.data) for a in self.setup + self.start
                if isinstance(a, Write) and a.op == "="]

    def summary(self) -> str:
        stores = [a for a in self.setup + self.start if isinstance(a, Write)]
        n, nbytes = len(stores), sum(len(a.data) for a in stores)
        extra = f", one-shot ({self.continues} continues)" if self.continues else ""
        extra += f", {self.repeats} inferences" if self.repeats > 1 else ""
        return (f"{self.name}: ai8x project, {self.layers} layers, {n} bus writes "
                f"({nbytes} bytes), {len(self.expected)} expected words{extra}")


# -- lexical layer -----------------------------------------------------------------------------
@dataclass
class _Item:
    line: int
    text: str  # whitespace collapsed
    kind: str  # "stmt" (ends with ;), "open" (ends with {), "close", "pp"

    @property
    def compact(self) -> str:
        return re.sub(r"\s+", "", self.text)


def _items(text: str) -> list[_Item]:
    """Split comment-free C text into statements, block heads, block ends and preprocessor
    lines, each with the line it starts on."""
    items: list[_Item] = []
    buf: list[str] = []
    start = 0
    line = 1
    depth = 0
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        ch = text[i]
        if at_line_start and ch == "#" and not "".join(buf).strip():
            j = text.find("\n", i)
            j = n if j < 0 else j
            items.append(_Item(line, text[i:j].strip(), "pp"))
            buf = []
            i = j
            continue
        if ch == "\n":
            line += 1
            at_line_start = True
            buf.append(" ")
            i += 1
            continue
        if not ch.isspace():
            at_line_start = False
        if ch in "\"'":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            if not "".join(buf).strip():
                start = line
            buf.append(text[i:j + 1])
            i = j + 1
            continue
        if not "".join(buf).strip() and not ch.isspace():
            start = line
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if depth == 0 and ch in ";{}":
            if ch == "}":
                if "".join(buf).strip():
                    items.append(_Item(start, " ".join("".join(buf).split()), "stmt"))
                items.append(_Item(line, "}", "close"))
            else:
                buf.append(ch)
                items.append(_Item(start, " ".join("".join(buf).split()),
                                   "stmt" if ch == ";" else "open"))
            buf = []
            i += 1
            continue
        buf.append(ch)
        i += 1
    if "".join(buf).strip():
        items.append(_Item(start, " ".join("".join(buf).split()), "stmt"))
    return items


# -- constant expressions -----------------------------------------------------------------------
_SIZEOF = {"uint8_t": 1, "int8_t": 1, "uint16_t": 2, "int16_t": 2, "uint32_t": 4,
           "int32_t": 4}


def _const(expr: str, where: str) -> int:
    """Evaluate an integer constant expression of the generated code (literals with optional
    U/L suffixes, sizeof of the fixed-width types, ~ - + * << >> | & ^ and parentheses) as a
    32-bit unsigned value."""
    e = re.sub(r"sizeof\s*\(\s*(\w+)\s*\)",
               lambda m: str(_SIZEOF[m.group(1)]) if m.group(1) in _SIZEOF else m.group(0), expr)
    e = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", e)
    try:
        tree = ast.parse(e.strip(), mode="eval")
    except SyntaxError:
        raise Ai8xImportError(f"{where}: not a constant expression: {expr.strip()!r}") from None

    def ev(node) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.USub,
                                                                   ast.UAdd)):
            v = ev(node.operand)
            return ~v if isinstance(node.op, ast.Invert) else (-v if isinstance(
                node.op, ast.USub) else v)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            ops = {ast.BitOr: lambda: a | b, ast.BitAnd: lambda: a & b,
                   ast.BitXor: lambda: a ^ b, ast.LShift: lambda: a << b,
                   ast.RShift: lambda: a >> b, ast.Add: lambda: a + b, ast.Sub: lambda: a - b,
                   ast.Mult: lambda: a * b}
            if type(node.op) in ops:
                return ops[type(node.op)]()
        raise Ai8xImportError(f"{where}: not a constant expression: {expr.strip()!r}")

    return ev(tree) & MASK32


def _words(values: list[int]) -> bytes:
    """32-bit little-endian words (values taken modulo 2**32, as a uint32_t store does)."""
    return struct.pack(f"<{len(values)}I", *(v & MASK32 for v in values))


# -- headers ------------------------------------------------------------------------------------
@dataclass
class _Array:
    name: str
    values: list[int]
    where: str


_INT = re.compile(r"(-)?(0[xX][0-9a-fA-F]+|\d+)[uUlL]*")


def _parse_header(path: Path, arrays: dict[str, _Array], scalars: dict[str, str]) -> None:
    """``#define NAME { v, v, ... }`` (continued with backslashes) and ``#define NAME value``."""
    lines = strip_comments(_read(path)).split("\n")
    i = 0
    while i < len(lines):
        ln = lines[i]
        m = re.match(r"\s*#\s*define\s+(\w+)\s*(.*)$", ln)
        if not m:
            i += 1
            continue
        name, rest = m.group(1), m.group(2)
        first = i + 1
        parts = [rest]  # continuation lines, joined once (a KERNELS record has thousands)
        while parts[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            parts[-1] = parts[-1].rstrip()[:-1]
            parts.append(lines[i + 1])
            i += 1
        body = " ".join(parts)
        i += 1
        where = f"{path.name}:{first}"
        body = body.strip()
        if not body.startswith("{"):
            scalars[name] = body
            continue
        if not body.endswith("}"):
            raise Ai8xImportError(f"{where}: #define {name}: array record not closed with '}}'")
        vals = []
        for k, tok in enumerate(t.strip() for t in body[1:-1].split(",")):
            if not tok:
                if k == 0 and body[1:-1].strip() == "":
                    break
                raise Ai8xImportError(f"{where}: #define {name}: empty element {k}")
            mm = _INT.fullmatch(tok)
            if not mm:
                raise Ai8xImportError(f"{where}: #define {name}: element {k} is not an "
                                      f"integer: {tok!r}")
            v = int(mm.group(2), 0)
            vals.append(-v if mm.group(1) else v)
        arrays[name] = _Array(name, vals, where)


# -- the interpreter ----------------------------------------------------------------------------
@dataclass
class _Func:
    name: str
    body: list[_Item]
    file: str
    line: int


_SDK_SKIP = re.compile(
    r"^(MXC_(GCFR|GCR)->\w+\s*(\||&)?=.*"  # chip power/reset/clock registers
    r"|(\w+\s*=\s*)?(MXC_SYS_ClockEnable|MXC_SYS_ClockDisable|MXC_NVIC_SetVector|"
    r"MXC_TMR_SW_Start|MXC_TMR_SW_Stop|MXC_TMR_Delay|MXC_ICC_Enable|MXC_SYS_Clock_Select|"
    r"MXC_SYS_ClockSourceEnable|MXC_Delay|"
    r"MXC_LP_EnterSleepMode|MXC_GPIO_Config|MXC_GPIO_OutSet|MXC_GPIO_OutClr|MXC_SYS_Reset_Periph|"
    r"NVIC_EnableIRQ|NVIC_DisableIRQ|SystemCoreClockUpdate|printf|puts|LED_On|LED_Off|"
    r"NVIC_EnableEVENT|NVIC_DisableEVENT|NVIC_ClearPendingIRQ|NVIC_ClearPendingEVENT|"
    r"Debug_Init|__WFI|__enable_irq|__disable_irq)\s*\(.*\)"
    r"|CNN_START|CNN_COMPLETE|SYS_START|SYS_COMPLETE"
    r"|cnn_time\s*=\s*\w*"
    r"|SCB->SCR\s*(\||&)?=.*"
    r"|MXC_SEMA->irq0\s*=.*"  # RISC-V main: semaphore interrupt telling the Arm core it is done
    r")\s*;$", re.S)

_STORE = re.compile(r"^\*\(\(volatile(uint8_t|uint16_t|uint32_t)\*\)(.+?)\)(\||&)?=(.+);$")
_CALL = re.compile(r"^(\w+)\((.*)\);$")
_DECL = re.compile(r"^(static|const|volatile|unsigned|signed|\s)*(u?int(8|16|32)_t|int|q15_t|"
                   r"q31_t)\s*\**\s*\w+(\s*\[\s*\w*\s*\])?(\s*,\s*\**\s*\w+)*\s*;$")
# (--riscv projects put the input arrays in the RISC-V flash: a leading
# __attribute__ ((section(".rvflash_section"))))
_BIND = re.compile(r"^(__attribute__\s*\(\(section\(\"[\w.]+\"\)\)\)\s*)?"
                   r"(static\s+)?const\s+(uint8_t|uint32_t)\s+(\w+)\s*\[\s*\]\s*=\s*(\w+)\s*;$")
_PTR_BIND = re.compile(r"^const\s+uint32_t\s*\*\s*ptr\s*=\s*(\w+)\s*;$")
# FIFO form of load_input (izer load.py loadfifo): "const uint32_t *in0 = input_0;" then
# for (i = 0; i < N; i++) { [while ((STAT & 1<<c) != 0);] FIFO_WRc = *inc++; ... }
_IN_BIND = re.compile(r"^const\s+uint32_t\s*\*\s*(in\d+)\s*=\s*(\w+)\s*;$")
_FIFO_WAIT = re.compile(r"while\(\(\(\*\(\(volatileuint32_t\*\)0x50000004\)&(\d+)\)\)!=0\);")
_FIFO_PUSH = re.compile(r"\*\(\(volatileuint32_t\*\)(0x500000(?:08|0c|0C|10|14))\)=\*(in\d+)\+\+;")
# CNN_FIF0_CTRL, CNN_FIFO_WR0 [UG-CNN: CNN Global Registers (CNN)]
FIFO_CTRL, FIFO_WR0 = 0x5000_0000, 0x5000_0008
# --zero-sram's BIST in cnn_init (izer apbaccess.py wait / verify): "while ((*A & M) != V);"
# polls, "if ((*A & M) != V) return CNN_FAIL;" ends cnn_init with CNN_FAIL
_REG = r"\*\(\(volatileuint32_t\*\)(0x[0-9a-fA-F]+)\)&(0x[0-9a-fA-F]+)"
_POLL = re.compile(rf"while\(\({_REG}\)!=(0x[0-9a-fA-F]+)\);")
_FAIL_IF = re.compile(rf"if\(\({_REG}\)!=(0x[0-9a-fA-F]+)\)returnCNN_FAIL;")
_FOR = r"for\(i=0;i<(\d+);i\+\+\)"
_FOR_BLOCK = re.compile(_FOR + r"\{")
_FOR_CALL = re.compile(_FOR + r"(cnn_load_weights|load_input)\(\);")

_HELPERS = {
    "memcpy32": ["while(n-->0){", "*dst++=*src++;", "}"],
    "memcpy_8to32": ["while(n-->0){", "*dst++=*src++;", "}"],
    "memcpy_96to128": ["while(n-->0){", "*dst++=*src++;", "*dst++=*src++;", "*dst++=*src++;",
                       "*dst++=0;", "}"],
}
_KLOOP_HEAD = "while((addr=(volatileuint32_t*)*ptr++)!=0){"
_KLOOP_MEX = ["*((volatileuint8_t*)((uint32_t)addr|1))=0x01;", "len=*ptr++;",
              "while(len-->0)*addr++=*ptr++;"]
_KLOOP_PLAIN = _KLOOP_MEX[1:]
_CHECK_LOOP = ["mask=*ptr++;", "len=*ptr++;", "for(i=0;i<len;i++)if((*addr++&mask)!=*ptr++){"]
_FLOW = {"cnn_enable", "cnn_disable", "cnn_init", "cnn_load_weights", "cnn_load_bias",
         "cnn_configure", "load_input", "cnn_start", "cnn_continue", "cnn_stop", "check_output",
         "CNN_ISR", "CNN_IRQHandler", "cnn_boost_enable", "cnn_boost_disable", "memcpy32",
         "memcpy_8to32", "memcpy_96to128"}
_WAIT = re.compile(r"^while\(cnn_time==0\)(MXC_LP_EnterSleepMode\(\)|__WFI\(\)|"
                   r"asmvolatile\(\"wfi\"\))?;$")
# The Arm core's main() of a --riscv project: boot the RISC-V core and sleep
_RISCV_BOOT = re.compile(r"^MXC_FCR->urvbootaddr\s*=\s*\(uint32_t\)\s*&\s*__FlashStart_\s*;$")


class _Importer:
    def __init__(self, path: Path) -> None:
        self.dir = path
        self.arrays: dict[str, _Array] = {}
        self.scalars: dict[str, str] = {}
        self.funcs: dict[str, _Func] = {}
        self.bindings: dict[str, tuple[str, str]] = {}  # C array name -> (macro, where)
        self.prog = Max78000Program(path, name=path.name)
        self.out: list[Step] | None = None
        self.phase = "setup"
        self.fifo_in: dict[str, tuple[str, str]] = {}  # load_input's inN -> (array, where)
        self.main_file = "main.c"  # main_riscv.c in --riscv projects

    # -- reading -------------------------------------------------------------------------------
    def read(self) -> None:
        if not self.dir.is_dir():
            raise Ai8xImportError(f"{self.dir}: not a directory (expected an ai8xize.py project "
                                  "directory with cnn.c, main.c, weights.h, sampledata.h, "
                                  "sampleoutput.h)")
        for f in FILES:  # exists(): a FIFO or device is refused when read, not "missing"
            if not (self.dir / f).exists():
                raise Ai8xImportError(f"{self.dir / f}: missing (not an ai8xize.py project "
                                      "directory?)")
        for h in HEADERS:
            if (self.dir / h).exists():
                _parse_header(self.dir / h, self.arrays, self.scalars)
        if (self.dir / RISCV_MAIN).is_file():
            self.main_file = RISCV_MAIN
            self._parse_c(self.dir / "cnn.c")
            self._parse_c(self.dir / RISCV_MAIN)
            arm: dict[str, _Func] = {}
            self._parse_c(self.dir / "main.c", arm)
            self._check_arm_boot(arm)
        else:
            for f in FILES:
                self._parse_c(self.dir / f)

    def _check_arm_boot(self, arm: dict[str, _Func]) -> None:
        """main.c of a --riscv project must only boot the RISC-V core (no accelerator access:
        the program the device sees is main_riscv.c's)."""
        if "main" not in arm:
            raise Ai8xImportError(f"{self.dir / 'main.c'}:1: no main() function")
        f = arm["main"]
        for it in f.body:
            if it.kind == "pp":
                continue
            if it.kind != "stmt" or not (_SDK_SKIP.match(it.text) or _RISCV_BOOT.match(it.text)
                                         or it.compact == "return0;"):
                raise Ai8xImportError(f"main.c:{it.line}: a --riscv project's Arm main() may "
                                      "only boot the RISC-V core (set urvbootaddr, enable its "
                                      f"clock, sleep); found: {it.text}")

    def _parse_c(self, path: Path, funcs: dict[str, _Func] | None = None) -> None:
        funcs = self.funcs if funcs is None else funcs
        items = _items(strip_comments(_read(path)))
        i = 0
        while i < len(items):
            it = items[i]
            where = f"{path.name}:{it.line}"
            if it.kind == "pp":
                m = re.match(r'#\s*include\s+"([^"]+)"', it.text)
                if m and m.group(1) in HEADERS and m.group(1) != "cnn.h" \
                        and not (self.dir / m.group(1)).is_file():
                    raise Ai8xImportError(f"{where}: includes {m.group(1)}, which is missing")
                i += 1
                continue
            if it.kind == "open":
                m = re.match(r"^(?:static\s+|inline\s+)*[\w\s\*]*?"
                             r"(?:__attribute__\s*\(\(.*?\)\)\s*)?\b(\w+)\s*\(([^()]*)\)\s*"
                             r"(__attribute__\s*\(\(.*\)\))?\s*\{$", it.text)
                depth, j = 1, i + 1
                while j < len(items) and depth:
                    if items[j].kind == "open":
                        depth += 1
                    elif items[j].kind == "close":
                        depth -= 1
                    j += 1
                if depth:
                    raise Ai8xImportError(f"{where}: block not closed")
                if m and not re.match(r"^(while|for|if|switch|do)\b", it.text):
                    funcs[m.group(1)] = _Func(m.group(1), items[i + 1:j - 1], path.name,
                                                   it.line)
                i = j
                continue
            if it.kind == "stmt":
                m = _BIND.match(it.text)
                if m:
                    self.bindings[m.group(4)] = (m.group(5), where)
            i += 1

    # -- helpers ---------------------------------------------------------------------------------
    def _array(self, cname: str, where: str) -> list[int]:
        if cname not in self.bindings:
            raise Ai8xImportError(f"{where}: array {cname!r} is not declared as "
                                  f"'static const uint32_t {cname}[] = MACRO;'")
        macro, decl = self.bindings[cname]
        if macro not in self.arrays:
            have = ", ".join(h for h in HEADERS if (self.dir / h).is_file())
            raise Ai8xImportError(f"{decl}: {macro} (for {cname}) is not defined in {have}")
        return self.arrays[macro].values

    def _emit(self, acc: Step) -> None:
        if self.out is None:
            raise Ai8xImportError(f"{acc.where}: bus write outside the supported program flow "
                                  "(after cnn_start() main() may load FIFO input and call "
                                  "cnn_stop() and cnn_continue(), then wait for the CNN)")
        self.out.append(acc)

    def _check_helper(self, name: str, where: str) -> None:
        f = self.funcs.get(name)
        if f is None:
            return  # declared in an SDK header: the usual semantics
        got = [it.compact for it in f.body]
        if got != _HELPERS[name]:
            raise Ai8xImportError(f"{f.file}:{f.line}: {name}() does not have the body the "
                                  f"generator writes; cannot assume its meaning (used at {where})")

    # -- statements ------------------------------------------------------------------------------
    def call(self, name: str, where: str, stack: tuple[str, ...] = ()) -> None:
        f = self.funcs.get(name)
        if f is None:
            raise Ai8xImportError(f"{where}: call of {name}(), which neither cnn.c nor main.c "
                                  "defines")
        if name in stack:
            raise Ai8xImportError(f"{where}: recursive call of {name}()")
        self.block(f, f.body, stack + (name,))

    def block(self, f: _Func, body: list[_Item], stack: tuple[str, ...]) -> str | None:
        i = 0
        ptr_array: str | None = None
        while i < len(body):
            it = body[i]
            where = f"{f.file}:{it.line}"
            c = it.compact
            t = it.text
            if it.kind == "pp":
                i += 1
                continue
            if it.kind == "close":
                raise Ai8xImportError(f"{where}: unexpected '}}'")
            if it.kind == "open":
                end = self._block_end(body, i, where)
                inner = body[i + 1:end]
                loop = _FOR_BLOCK.fullmatch(c)
                if c == _KLOOP_HEAD and f.name == "cnn_load_weights":
                    self._kernel_loop(ptr_array, [x.compact for x in inner], where)
                elif c == _KLOOP_HEAD and f.name == "check_output":
                    comp = [x.compact for x in inner]
                    if comp[:3] != _CHECK_LOOP:
                        raise Ai8xImportError(f"{where}: unsupported check loop body")
                    self._check_table(ptr_array, where)
                elif loop and f.name == "load_input":
                    self._fifo_loop(int(loop.group(1)), [x.compact for x in inner], where)
                elif loop and f.name == "main" and self.phase == "setup":
                    self._inference_loop(int(loop.group(1)), inner, where, f, stack)
                elif loop and f.name == "main":
                    n = int(loop.group(1))
                    comp = [x.compact for x in inner]
                    if comp[0] != "cnn_continue();" or not all(_WAIT.match(x) for x in comp[1:]) \
                            or len(comp) != 2 or self.phase != "wait":
                        raise Ai8xImportError(f"{where}: unsupported loop in main() (understood "
                                              "after the first wait: the one-shot "
                                              "cnn_continue() loop)")
                    self.prog.continues += n
                    if not self.prog.resume:
                        saved, self.out = self.out, self.prog.resume
                        self.call("cnn_continue", where, stack)
                        self.out = saved
                else:
                    raise Ai8xImportError(f"{where}: unsupported block statement: {t}")
                i = end + 1
                continue
            # -- simple statements --
            if c in ("returnCNN_OK;", "return0;", "return;"):
                return "return"
            if _SDK_SKIP.match(t):
                i += 1
                continue
            m = _STORE.match(c)
            if m:
                self._store(m, where)
                i += 1
                continue
            m = _PTR_BIND.match(t)
            if m:
                ptr_array = m.group(1)
                i += 1
                continue
            m = _IN_BIND.match(t)
            if m and f.name == "load_input":
                self.fifo_in[m.group(1)] = (m.group(2), where)
                i += 1
                continue
            if _DECL.match(t) or _BIND.match(t):
                i += 1
                continue
            if _WAIT.match(c) and f.name == "main":
                if self.phase not in ("started", "wait"):
                    raise Ai8xImportError(f"{where}: waiting for the CNN before cnn_start()")
                self.phase = "wait"
                self.prog.wait_where = self.prog.wait_where or where
                i += 1
                continue
            if c == "if(check_output()!=CNN_OK)fail();" and f.name == "main":
                if self.phase != "wait":
                    raise Ai8xImportError(f"{where}: check_output() before the CNN completed")
                self.prog.check_where = where
                saved, self.out = self.out, None
                self.call("check_output", where, stack)
                self.out = saved
                return "checked"
            m = re.fullmatch(r"if\(\(\*\(\(volatileuint32_t\*\)(0x[0-9a-fA-F]+)\)"
                             r"(&0x[0-9a-fA-F]+)?"
                             r"\)!=(0x[0-9a-fA-F]+)\)(returnCNN_FAIL|rv=CNN_FAIL);", c)
            if m and f.name == "check_output":
                mask = int(m.group(2)[1:], 16) if m.group(2) else MASK32
                self.prog.expected.append((int(m.group(1), 16), int(m.group(3), 16), mask))
                i += 1
                continue
            m = _POLL.fullmatch(c)
            if m:
                self._emit(Poll(*(int(g, 16) for g in m.groups()), where=where))
                i += 1
                continue
            m = _FAIL_IF.fullmatch(c)
            if m:
                self._emit(Check(_register_check(*(int(g, 16) for g in m.groups()), where,
                                                 f.name), where))
                i += 1
                continue
            if c == "if(cnn_init()!=CNN_OK)fail();" and f.name == "main":
                self.call("cnn_init", where, stack)
                i += 1
                continue
            m = _FOR_CALL.fullmatch(c)
            if m and f.name == "main" and self.phase == "setup":
                # --energy times 100 loads; each stores the same values: the end state is one's
                self.call(m.group(2), where, stack)
                i += 1
                continue
            m = _CALL.match(t)
            if m:
                self._call_stmt(m.group(1), m.group(2), where, f, stack)
                i += 1
                continue
            m = re.match(r"^(MXC_\w+)", t)
            if m:
                raise Ai8xImportError(f"{where}: unknown SDK call {m.group(1)} (not one of the "
                                      "clock/power/interrupt calls outside the accelerator)")
            raise Ai8xImportError(f"{where}: unsupported statement: {t}")
        return None

    @staticmethod
    def _block_end(body: list[_Item], i: int, where: str) -> int:
        depth, j = 1, i + 1
        while j < len(body):
            if body[j].kind == "open":
                depth += 1
            elif body[j].kind == "close":
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        raise Ai8xImportError(f"{where}: block not closed")

    def _call_stmt(self, name: str, args: str, where: str, f: _Func, stack) -> None:
        if name in ("cnn_boost_enable", "cnn_boost_disable"):
            return  # a GPIO outside the accelerator
        if name in ("memcpy32", "memcpy_8to32", "memcpy_96to128"):
            self._memcpy(name, args, where)
            return
        if name == "cnn_start" and f.name == "main":
            if self.phase != "setup":
                raise Ai8xImportError(f"{where}: cnn_start() called twice")
            self.out = self.prog.start
            self.call(name, where, stack)
            self.out = None
            self.phase = "started"
            return
        if name in ("load_input", "cnn_stop", "cnn_continue") and self.phase == "started" \
                and f.name == "main":
            # FIFO input: the generated main() loads the FIFOs after cnn_start(); the pushes
            # follow the start writes (the armed engine drains them, fifo.py). --stop-start:
            # cnn_stop(); cnn_continue(); before the wait, with the start writes likewise
            self.out = self.prog.start
            self.call(name, where, stack)
            self.out = None
            return
        if name in self.funcs and (name in _FLOW or name in ("fail",)):
            if name == "fail":
                raise Ai8xImportError(f"{where}: main() calls fail() unconditionally")
            self.call(name, where, stack)
            return
        if name in ("softmax_layer", "cnn_unload", "cnn_disable") and self.phase == "wait":
            return
        if name in self.funcs:
            raise Ai8xImportError(f"{where}: call of {name}() is not part of the supported "
                                  "program flow")
        if name.startswith("MXC_"):
            raise Ai8xImportError(f"{where}: unknown SDK call {name} (not one of the "
                                  "clock/power/interrupt calls outside the accelerator)")
        raise Ai8xImportError(f"{where}: call of unknown function {name}()")

    def _store(self, m: re.Match, where: str) -> None:
        width = {"uint8_t": 1, "uint16_t": 2, "uint32_t": 4}[m.group(1)]
        addr = _const(m.group(2), where)
        value = _const(m.group(4), where) & ((1 << (8 * width)) - 1)
        op = {None: "=", "|": "|=", "&": "&="}[m.group(3)]
        if op != "=" and width != 4:
            raise Ai8xImportError(f"{where}: {op} on a {8 * width}-bit location is not supported")
        if addr % width:
            raise Ai8xImportError(f"{where}: misaligned {8 * width}-bit store to {addr:#010x}")
        if op == "=" and width == 4 and addr == 0x5010_0008:
            self.prog.layers = (value & 0x1F) + 1  # CNNx16_0_LCNT_MAX [UG-CNN: Table 27-21]
        self._emit(Write(addr, value.to_bytes(width, "little"), op, where))

    def _memcpy(self, name: str, args: str, where: str) -> None:
        self._check_helper(name, where)
        m = re.fullmatch(r"\s*\(\s*uint32_t\s*\*\s*\)\s*(0x[0-9a-fA-F]+)\s*,\s*(\w+)\s*,(.+)",
                         args)
        if not m:
            raise Ai8xImportError(f"{where}: unsupported {name}() arguments: {args.strip()}")
        dst, arr, n = int(m.group(1), 16), m.group(2), _const(m.group(3), where)
        vals = self._array(arr, where)
        per = {"memcpy32": 1, "memcpy_8to32": 1, "memcpy_96to128": 3}[name]
        if n * per > len(vals):
            macro, decl = self.bindings[arr]
            raise Ai8xImportError(f"{where}: {name}() copies {n * per} elements of {arr} but "
                                  f"{macro} ({self.arrays[macro].where}) has {len(vals)}")
        if name == "memcpy32":
            data = _words(vals[:n])
        elif name == "memcpy_8to32":
            # *dst++ = *src++ with a uint8_t source: the byte zero-extended into a word
            data = _words([v & 0xFF for v in vals[:n]])
        else:
            data = b"".join(b"".join((v & MASK32).to_bytes(4, "little")
                                     for v in vals[3 * k:3 * k + 3]) + bytes(4)
                            for k in range(n))
        if data:
            self._emit(Write(dst, data, "=", where))

    def _kernel_loop(self, arr: str | None, body: list[str], where: str) -> None:
        """``while ((addr = *ptr++) != 0) { [set address] len = *ptr++; while (len-- > 0)
        *addr++ = *ptr++; }`` over the KERNELS records."""
        if body == _KLOOP_MEX:
            mexpress = True
        elif body == _KLOOP_PLAIN:
            mexpress = False
        else:
            raise Ai8xImportError(f"{where}: unsupported kernel loader loop body")
        if arr is None:
            raise Ai8xImportError(f"{where}: kernel loop without 'const uint32_t *ptr = ...;'")
        for macro, src, k, addr, _head, words in self._records(arr, where, "record", 1):
            if addr & 3:
                raise Ai8xImportError(f"{src}: {macro}: record address {addr:#010x} misaligned")
            if mexpress:
                self._emit(Write(addr | 1, b"\x01", "=", f"{where} ({macro} element {k})"))
            self._emit(Write(addr, _words(words), "=", f"{where} ({macro} element {k})"))

    def _records(self, arr: str, where: str, kind: str, extra: int):
        """Walk a header array of records ``addr, <extra header values>, n, n values`` ended by
        addr 0 (KERNELS and SAMPLE_OUTPUT): yields (macro, source, element index, addr,
        extra header values, values); malformed records are errors naming the array."""
        vals = self._array(arr, where)
        macro = self.bindings[arr][0]
        src = self.arrays[macro].where
        k = 0
        while True:
            if k >= len(vals):
                raise Ai8xImportError(f"{src}: {macro}: {kind}s not terminated by 0")
            addr = vals[k] & MASK32
            if addr == 0:
                return
            if k + extra >= len(vals):
                raise Ai8xImportError(f"{src}: {macro}: {kind} at element {k} is truncated")
            head, n = vals[k + 1:k + extra], vals[k + extra]
            body = vals[k + 1 + extra:k + 1 + extra + n]
            if len(body) != n:
                raise Ai8xImportError(f"{src}: {macro}: {kind} at element {k} ({addr:#010x}) "
                                      f"wants {n} values, {len(body)} left")
            yield macro, src, k, addr, head, body
            k += 1 + extra + n

    def _fifo_loop(self, n: int, body: list[str], where: str) -> None:
        """The FIFO loop of load_input: each iteration optionally polls CNN_FIF0_STAT.full of
        FIFO c, then writes the next word of input_c to CNN_FIFO_WRc (izer load.py)."""
        pushes: list[tuple[int, str]] = []
        k = 0
        while k < len(body):
            wait = _FIFO_WAIT.fullmatch(body[k])
            if wait:
                k += 1
                if k >= len(body):
                    raise Ai8xImportError(f"{where}: FIFO wait without a FIFO write")
            m = _FIFO_PUSH.fullmatch(body[k])
            if not m:
                raise Ai8xImportError(f"{where}: unsupported statement in the FIFO loop of "
                                      f"load_input(): {body[k]}")
            addr = int(m.group(1), 16)
            fifo = (addr - 0x5000_0008) // 4
            if wait and int(wait.group(1)) != 1 << fifo:
                raise Ai8xImportError(f"{where}: the FIFO loop waits on status bit "
                                      f"{wait.group(1)} but writes FIFO {fifo}")
            if m.group(2) not in self.fifo_in:
                raise Ai8xImportError(f"{where}: {m.group(2)} is not declared as "
                                      f"'const uint32_t *{m.group(2)} = input_N;'")
            pushes.append((addr, m.group(2)))
            k += 1
        if not pushes:
            raise Ai8xImportError(f"{where}: empty FIFO loop in load_input()")
        data = {}
        for _, ptr in pushes:
            arr, decl = self.fifo_in[ptr]
            vals = self._array(arr, decl)
            if len(vals) < n:
                raise Ai8xImportError(f"{where}: the FIFO loop writes {n} words of {arr}, which "
                                      f"has {len(vals)}")
            data[ptr] = vals
        for i in range(n):
            for addr, ptr in pushes:
                self._emit(Write(addr, (data[ptr][i] & MASK32).to_bytes(4, "little"), "=",
                                  where))

    def _inference_loop(self, n: int, inner: list[_Item], where: str, f: _Func,
                        stack: tuple[str, ...]) -> None:
        """--energy's measured loop: ``for (i = 0; i < N; i++) { [load_input();] cnn_start();
        [load_input();] <wait> }`` (input in memory before the start, or through the FIFOs
        after it): N inferences, the input reloaded before each later one."""
        comp = [x.compact for x in inner]
        if len(comp) != 3 or not _WAIT.match(comp[2]) or "cnn_start();" not in comp[:2] \
                or "load_input();" not in comp[:2]:
            raise Ai8xImportError(f"{where}: unsupported loop in main() (understood: the "
                                  "one-shot cnn_continue() loop and --energy's loop of "
                                  "load_input(), cnn_start() and the wait)")
        if comp[0] == "load_input();":
            self.call("load_input", where, stack)
            saved, self.out = self.out, self.prog.reload
            self.call("load_input", where, stack)
            self.out = saved
            self._call_stmt("cnn_start", "", where, f, stack)
        else:
            self._call_stmt("cnn_start", "", where, f, stack)
            self._call_stmt("load_input", "", where, f, stack)
        self.phase = "wait"
        self.prog.wait_where = f"{f.file}:{inner[2].line}"
        self.prog.repeats = n

    def _check_fifos(self) -> None:
        """An enabled FIFO that load_input() never writes leaves layer 0 waiting for ever (with
        fifo_cpl the others never drain either): an error naming both, at import. ai8xize.py
        --fifo writes such projects for processor maps whose input channels are not on
        processors 16n..16n+3 in groups of four (test-fifostream-group: processors 0, 16, 32
        but only FIFO 0 written; that test ran on the RISC-V fast FIFO)."""
        ctl = [a for a in self.prog.setup if isinstance(a, Write) and a.address == FIFO_CTRL
               and a.op == "=" and len(a.data) == 4]
        if not ctl:
            return
        value = int.from_bytes(ctl[-1].data, "little")
        enabled = [n for n in range(4) if value >> (12 + n) & 1]       # fifo_en 15:12
        pushes = [a for a in self.prog.setup + self.prog.start
                  if isinstance(a, Write) and FIFO_WR0 <= a.address < FIFO_WR0 + 16]
        written = sorted({(a.address - FIFO_WR0) // 4 for a in pushes})
        missing = [n for n in enabled if n not in written]
        if missing:
            coupled = (" (fifo_cpl = 1: the FIFOs are read together, so none drains)"
                       if value >> 11 & 1 else "")
            load = self.funcs.get("load_input")
            if pushes:  # the first FIFO write's line
                writes = (f"load_input() ({pushes[0].where}) writes FIFO(s) "
                          f"{', '.join(map(str, written))} only")
            elif load is not None:  # the function's own line in main.c
                writes = f"load_input() ({load.file}:{load.line}) writes no FIFO"
            else:
                writes = f"no FIFO is written ({self.main_file} defines no load_input())"
            raise Ai8xImportError(
                f"{ctl[-1].where}: CNN_FIF0_CTRL = {value:#010x} enables FIFO(s) "
                f"{', '.join(map(str, enabled))}{coupled}, but {writes}: layer 0 would wait for "
                f"ever for the data of processors "
                f"{', '.join(f'{16 * n}-{16 * n + 3}' for n in missing)} (FIFO n feeds "
                "processors 16n..16n+3); the program cannot complete")

    def _check_table(self, arr: str | None, where: str) -> None:
        if arr is None:
            raise Ai8xImportError(f"{where}: check loop without 'const uint32_t *ptr = ...;'")
        for _, _, _, addr, head, block in self._records(arr, where, "block", 2):
            mask = head[0] & MASK32
            for j, v in enumerate(block):
                self.prog.expected.append((addr + 4 * j, v & MASK32, mask))

    # -- the flow --------------------------------------------------------------------------------
    def run(self) -> Max78000Program:
        self.read()
        if "main" not in self.funcs:
            raise Ai8xImportError(f"{self.dir / self.main_file}:1: no main() function")
        main = self.funcs["main"]
        self.out = self.prog.setup
        end = self.block(main, main.body, ("main",))
        if end != "checked":
            raise Ai8xImportError(f"{self.main_file}:{main.line}: main() does not reach "
                                  "'if (check_output() != CNN_OK) fail();' after cnn_start() "
                                  "and the wait for the CNN")
        # the CNN interrupt handler: CNN_ISR (Arm, set with MXC_NVIC_SetVector) or
        # CNN_IRQHandler (RISC-V vector table name)
        isr_name = next((n for n in ("CNN_ISR", "CNN_IRQHandler") if n in self.funcs), None)
        if isr_name:
            self.out = self.prog.isr
            isr = self.funcs[isr_name]
            self.block(isr, isr.body, (isr_name,))
        self.out = None
        self._check_fifos()
        if not self.prog.start:
            raise Ai8xImportError(f"cnn.c:{self.funcs['cnn_start'].line}: cnn_start() writes "
                                  "nothing")
        if not self.prog.expected:
            raise Ai8xImportError(f"{self.main_file}:{self.funcs['check_output'].line}: "
                                  "check_output() "
                                  "checks nothing (no known answer)")
        return self.prog


def _register_check(address: int, mask: int, value: int, where: str, func: str):
    """``if ((*address & mask) != value) return CNN_FAIL;`` outside check_output (the BIST
    result in cnn_init): silent when it holds; else a failed check, as main() then calls
    fail()."""
    def check(hp) -> CheckResult | None:
        got = int.from_bytes(hp.device.host_read(address, 4), "little") & mask
        if got == value:
            return None
        return CheckResult(False, f"FAIL {where}: {func}() returns CNN_FAIL: {address:#010x} & "
                                  f"{mask:#x} reads {got:#x}, not {value:#x}; main() calls fail()")
    return check


def import_ai8x_project(path: str | Path) -> Max78000Program:
    """Read an ai8xize.py project directory (raises :class:`Ai8xImportError`)."""
    return _Importer(Path(path)).run()


def load_ai8x_program(path: str | Path) -> HostProgram:
    """Import ``path`` as the host program its main() is (raises Ai8xImportError naming
    file:line). Run control applies its setup and start writes on attach, so the device then
    sits armed before layer 0."""
    host = import_ai8x_project(path).host_program()
    host.vendor_cycles = read_latency(Path(path) / "latency.txt")
    return host


def read_latency(path: Path) -> tuple[str, int, list[int]] | None:
    """ai8xize.py's latency estimate, when the project has one: latency.txt holds the total,
    then one line per entry of its table, the first being the start-up (1 cycle) and then one
    per layer (facts from ai8x-synthesis izer/rtlsim.py write_latency and the ESTIMATED LATENCY
    table of izer/backend/max7800x.py). None without the file; a malformed one is an error
    naming its line."""
    if not path.exists():  # a FIFO or device is refused by _read, not skipped
        return None
    values = []
    for n, line in enumerate(_read(path).splitlines(), 1):
        if line.strip():
            try:
                values.append(abs(int(line.strip())))
            except ValueError:
                raise Ai8xImportError(f"{path.name}:{n}: not a cycle count: {line.strip()!r}") \
                    from None
    if not values:
        raise Ai8xImportError(f"{path.name}: empty")
    return "ai8xize.py latency.txt", values[0], values[2:]  # without the start-up entry

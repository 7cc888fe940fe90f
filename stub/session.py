"""One gdb connection: packet dispatch for the all-stop RSP subset in docs/design-notes.md "GDB
view".

A session never raises into its transport loop: every malformed or failing request gets a
protocol-correct reply (``Exx`` or empty), so no client input can crash or hang the server.
"""
from __future__ import annotations

import logging
import re
import struct
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from accelstub.devices import BusError, DeviceError, TargetRunning
from accelstub.devices.device import SIGINT, Stop
from accelstub.devices.runcontrol import watch_hit

from .commands import CommandError, execute
from .compile_notice import CompileNotice
from .listener import OutputQueue
from .rsp_codec import PacketReader, escape, frame, hex_rle, unescape

if TYPE_CHECKING:
    from .server import GdbServer

log = logging.getLogger("accelstub.gdb")

PACKET_SIZE = 0x20000  # bytes of payload we accept; gdb then reads 64 KiB per 'm'
E_FAULT, E_INVAL, E_RUNNING, E_PERM = b"E0e", b"E16", b"E10", b"E01"
_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
#: a packet's two checksum digits -> value, any case (a dict lookup is 3x int(x, 16), and
#: strict: int() would take "+5" or " 5")
_CHECKSUMS = {bytes((a, b)): int(bytes((a, b)), 16) for a in _HEX_DIGITS for b in _HEX_DIGITS}


def hex_number(text: bytes) -> int:
    """A packet's hex number: digits only. Python's int(x, 16) also takes a sign, spaces and
    underscores, so ``m 0,-1`` would read -1 bytes and answer an empty packet instead of an
    error; ValueError here becomes E16."""
    if not text or not _HEX_DIGITS.issuperset(text):
        raise ValueError(f"not a hex number: {text[:20]!r}")
    return int(text, 16)


def hex_bytes(text: bytes) -> bytes:
    """Hex-encoded data (an even number of hex digits); ValueError otherwise."""
    if len(text) % 2 or not _HEX_DIGITS.issuperset(text):
        raise ValueError("not hex-encoded data")
    return bytes.fromhex(text.decode("ascii"))


#: a whole request _fast_packet answers (reads: no state change, always a reply): the payload
#: (group 1; ``m`` with hex numbers only also splits into address 2 and length 3), checksum 4
_FAST_READ = re.compile(rb"\$(m([0-9a-fA-F]+),([0-9a-fA-F]+)|[mpxg][^#$]*)#([0-9a-fA-F]{2})")


def o_packet(text: str) -> bytes:
    """Text for gdb's console (an ``O`` packet)."""
    return b"O" + text.encode("utf-8", "replace").hex().encode()


class GdbSession:
    def __init__(self, server: GdbServer, conn) -> None:
        self.server = server
        self.rc = server.rc
        self.device = server.rc.device
        self.conn = conn
        self.reader = PacketReader(PACKET_SIZE)
        self.noack = False
        self.binary_upload = False
        self.notify = False  # client asked for %Stop notifications (accelstub-notify+)
        #: client asked for Exx after a failed monitor command's text (accelstub-rcmd-errors+)
        self.rcmd_errors = False
        #: gdb steps once after every watchpoint stop (ARM watchpoints are "non-steppable":
        #: it expects the access not to have happened yet); ours stop after the unit that made
        #: the access, so that one step must not run another unit
        self._after_watch = False
        self.waiting = False  # a stop reply is owed for c/s/vCont
        self._compiling: CompileNotice | None = None  # listening while this session's run goes
        self._send_lock = threading.Lock()
        self._last_sent = b""
        self.closed = False
        #: what the run-control worker sends (the stop reply owed, %Stop notifications) goes
        #: through a queue of its own: a client that does not read must not hold the worker
        #: (for every client); past the unsolicited limit the connection is cut
        self.stop_output = OutputQueue(self._send_locked, lambda: self.conn.close(), "gdb-stops")
        self._after_reply = ""  # "noack" | "close": takes effect once the reply is sent
        self._handlers: dict[str, Callable[[bytes], bytes | None]] = {
            "?": self._status, "g": self._read_core, "G": self._write_core,
            "p": self._read_reg, "P": self._write_reg, "m": self._read_mem, "M": self._write_mem,
            "X": self._write_bin, "x": self._read_bin, "c": self._cont, "s": self._step,
            "Z": self._insert, "z": self._remove, "q": self._query, "Q": self._set_query,
            "v": self._v_packet, "H": lambda p: b"OK", "T": lambda p: b"OK",
            "D": self._detach, "k": self._kill, "b": self._reverse,
        }

    # -- transport loop -----------------------------------------------------------------------
    def serve(self) -> None:
        self.rc.add_stop_listener(self._on_stop)
        try:
            while not self.closed:
                data = self.conn.recv()
                if not data:
                    break
                if self.noack and self._fast_packet(data):
                    continue
                for ev in self.reader.feed(data):
                    self._event(ev)
                    if self.closed:
                        break
        finally:
            self.closed = True
            self.rc.remove_stop_listener(self._on_stop)
            if self._compiling is not None:
                self._compiling.uninstall()
            self.rc.drop_owner(self)  # its Z breakpoints and watchpoints end with it
            self.server.session_ended(self)
            self.stop_output.close(flush_timeout=0.5)
            self.conn.close()

    def _fast_packet(self, data: bytes) -> bool:
        """The common case in no-ack mode: exactly one whole read request arrived (``m``,
        ``p``, ``x``, ``g``). Answer it straight from its handler, in one write; False if it is
        anything else, which the general parser then takes (it also reports bad checksums).
        One regular expression checks the frame and splits an ``m`` request's numbers: a
        4-byte read's Python went from ~3.0 to ~2.6 us (issue 31 #6)."""
        m = _FAST_READ.fullmatch(data)
        if m is None or self.reader.pending or _CHECKSUMS[m[4]] != sum(m[1]) & 0xFF:
            return False
        try:
            reply = self._mem_hex(int(m[2], 16), int(m[3], 16)) if m[2] else self.dispatch(m[1])
        except Exception as e:  # as _dispatch_safely
            reply = self._failed(m[1], e)
        self.send(reply)
        return True

    def send(self, payload: bytes, ack: bool = False, notification: bool = False) -> None:
        """One write per reply: the ack and the packet go out together (TCP_NODELAY)."""
        data = frame(payload, notification)
        if not notification:
            self._last_sent = data
        self._raw((b"+" + data) if ack else data)

    def console(self, text: str) -> None:
        """Text for gdb's console as an ``O`` packet (only while gdb waits for a reply)."""
        if text:
            self.send(o_packet(text))

    def _event(self, ev) -> None:
        ack = not self.noack
        if ev.kind == "packet":
            reply = self._dispatch_safely(ev.payload)
            if reply is not None:
                self.send(reply, ack=ack)
            elif ack:
                self._raw(b"+")
            if self._after_reply == "noack":
                self.noack = True
            elif self._after_reply == "close":
                self.closed = True
            self._after_reply = ""
        elif ev.kind == "interrupt":
            if self.waiting and not self.server.is_controller(self):
                # an observer's Ctrl-C ends its own wait; the run it did not start goes on
                self.waiting = False
                self.send(self.stop_reply(Stop("halt", SIGINT)))
            elif self.waiting:
                self.rc.halt()
        elif ev.kind == "bad_checksum":
            if ack:
                self._raw(b"-")
            else:
                self.send(E_INVAL)
        elif ev.kind == "oversized":
            self.send(E_INVAL, ack=ack)
        elif ev.kind == "nack" and self._last_sent:
            self._raw(self._last_sent)

    def _raw(self, data: bytes) -> None:
        try:
            self._send_locked(data)
        except OSError:
            self.closed = True

    def _send_locked(self, data: bytes) -> None:
        with self._send_lock:
            self.conn.send(data)

    def _post(self, payload: bytes, notification: bool = False) -> None:
        """:meth:`send` for the run-control worker's thread: queued (see stop_output)."""
        data = frame(payload, notification)
        if not notification:
            self._last_sent = data
        self.stop_output.put(data, unsolicited=True)

    def _dispatch_safely(self, payload: bytes) -> bytes | None:
        try:
            return self.dispatch(payload)
        except Exception as e:  # never let one request kill the session
            return self._failed(payload, e)

    @staticmethod
    def _failed(payload: bytes, e: Exception) -> bytes:
        log.exception("error handling packet %r: %s", payload[:64], e)
        return E_PERM

    def dispatch(self, payload: bytes) -> bytes | None:
        if not payload:
            return b""
        handler = self._handlers.get(chr(payload[0]))
        if handler is None:
            return b""
        return handler(payload)

    # -- stops --------------------------------------------------------------------------------
    def stop_reply(self, stop: Stop) -> bytes:
        pc = self.device.pc.to_bytes(4, "little").hex()
        reply = b"T%02x0f:%s;" % (stop.signal, pc.encode())
        if stop.watch:
            reply += b"%s:%x;" % (stop.watch[0].encode(), stop.watch[1])
        if stop.replaylog:
            reply += b"replaylog:%s;" % stop.replaylog.encode()
        return reply

    def _own_watch(self, stop: Stop) -> Stop:
        """A watchpoint stop as this connection reports it. gdb steps over a watchpoint stop
        that none of its own watchpoints explains and resumes, so a stop caused by a
        target-level `wp` (monitor, telnet, Tcl) or another client's watchpoint would never
        show: such a stop goes out as a plain SIGTRAP (gdb stops and says so) with a console
        line naming the access. A stop one of this connection's watchpoints explains names
        that watchpoint's first touched address. accelstub's own client (accelstub-notify+)
        never steps over a stop: it gets every watchpoint stop as it is."""
        if not stop.watch or self.notify:
            return stop
        own, touched = self.rc.watchpoints_of(self), self.rc.last_touched
        hit = watch_hit(own, touched) if own and touched is not None else None
        if hit is not None:
            return hit
        kind, addr = stop.watch
        what = {"watch": "write to", "rwatch": "read of", "awatch": "access to"}[kind]
        return Stop("watchpoint", stop.signal, message="accelstub: watchpoint not set by this "
                    f"gdb (monitor wp or another client): {what} 0x{addr:08x}")

    def _on_stop(self, stop: Stop) -> None:
        if self.waiting:
            self.waiting = False
            if self._compiling is not None:
                self._compiling.finish()  # the total, when a compile was announced
                self._compiling = None
            shown = self._own_watch(stop)
            msg = stop.message or shown.message
            if stop.reason == "fault":
                msg = f"accelstub: {self.device.name} fault: {msg}"
            elif stop.reason == "done" and self.device.at_end():  # not a stop on a unit
                msg = (f"accelstub: {self.device.name} program ended: pc {self.device.pc:#010x}"
                       f" is its end address (EMU_END)\n{msg}")
            if msg:
                self._post(o_packet(msg.rstrip("\n") + "\n"))
            self._after_watch = bool(shown.watch) and not self.notify
            self._post(self.stop_reply(shown))
        elif self.notify:
            self._post(b"Stop:" + self.stop_reply(stop), notification=True)

    def _resume(self, step: bool, addr: bytes = b"", reverse: bool = False) -> bytes | None:
        after_watch, self._after_watch = self._after_watch, False
        if step and after_watch and not addr and not self.rc.running:
            return self.stop_reply(Stop("step"))  # gdb's step over the access: already done
        if not self.server.is_controller(self):
            if self.rc.running and not step:  # an observer's continue returns at the next stop
                self.waiting = True
                return None
            self.console("accelstub: another client controls run state; this connection may "
                         "read and write but not run the target\n")
            return E_PERM
        if self.rc.running:
            self.waiting = True
            return None
        if addr:
            try:
                self.device.set_pc(hex_number(addr))
            except (ValueError, DeviceError) as e:
                self.console(f"accelstub: {e}\n")
                return E_INVAL
        self.waiting = True
        # kernels compiled on first use: gdb's console says so, not only the server's terminal
        if self._compiling is not None:
            self._compiling.uninstall()
        self._compiling = CompileNotice(lambda text: self._post(o_packet(text))).install()
        try:
            if reverse:
                self.rc.start_reverse(step)
            else:
                self.rc.start_step() if step else self.rc.resume()
        except TargetRunning:
            pass
        return None

    def _status(self, p: bytes) -> bytes | None:
        """``?``: the current stop. While the target runs there is none to report: halt it, as
        OpenOCD halts the target when gdb attaches, and answer with the stop that causes (never
        an earlier stop and a pc that has moved on). Only the controller halts: a second client
        attaching must not stop the run the first one's ``continue`` started; it gets a stop
        reply with signal 0 at the pc of the moment, and its own ``continue`` then returns at
        the next stop (an observer's continue)."""
        if self.rc.running and not self.server.is_controller(self):
            return self.stop_reply(Stop("running", 0))
        if self.rc.running:
            self.waiting = True
            self.rc.halt()
            if self.rc.running:
                return None  # the stop reply follows when the halt lands (_on_stop)
            self.waiting = False
        return self.stop_reply(self._own_watch(self.rc.last_stop))

    def _cont(self, p: bytes) -> bytes | None:
        return self._resume(False, p[1:])

    def _step(self, p: bytes) -> bytes | None:
        return self._resume(True, p[1:])

    def _reverse(self, p: bytes) -> bytes | None:
        """``bs``/``bc`` (ReverseStep+, ReverseContinue+): one unit back, or back to a
        breakpoint, a watchpoint or the start of the history (RunControl.start_reverse)."""
        if p not in (b"bs", b"bc"):
            return b""
        return self._resume(p == b"bs", reverse=True)

    def _v_packet(self, p: bytes) -> bytes | None:
        if p == b"vCont?":
            return b"vCont;c;C;s;S;t"
        if p.startswith(b"vCont;"):
            action = p[6:].split(b";")[0].split(b":")[0]
            if action[:1] in (b"c", b"C"):
                return self._resume(False)
            if action[:1] in (b"s", b"S"):
                return self._resume(True)
            if action[:1] == b"t":
                if self.rc.running:
                    self.waiting = True
                    self.rc.halt()
                    return None
                return self.stop_reply(Stop("halt", SIGINT))
            return E_INVAL
        if p.startswith(b"vKill"):
            self._after_reply = "close"
            return b"OK"
        return b""  # vMustReplyEmpty and everything unknown

    def _detach(self, p: bytes) -> bytes:
        self._after_reply = "close"
        return b"OK"

    def _kill(self, p: bytes) -> bytes | None:
        self._after_reply = "close"
        return None

    # -- registers ------------------------------------------------------------------------------
    def _core_hex(self) -> bytes:
        read = self.device.read_core
        values = [read(n) for n in self.server.core_names]
        return struct.pack("<%dI" % len(values), *values).hex().encode()

    def _read_core(self, p: bytes) -> bytes:
        return self._core_hex()

    def _write_core(self, p: bytes) -> bytes:
        try:
            data = hex_bytes(p[1:])
        except ValueError:
            return E_INVAL
        if len(data) % 4:
            return E_INVAL
        try:
            for i, name in enumerate(self.server.core_names):
                if len(data) >= 4 * i + 4:
                    v = int.from_bytes(data[4 * i:4 * i + 4], "little")
                    if name == "pc":
                        if v != self.device.pc:
                            self.device.set_pc(v)
                    else:
                        self.device.write_core(name, v)
        except TargetRunning:
            return E_RUNNING
        except (BusError, DeviceError):
            return E_INVAL
        return b"OK"

    def _read_reg(self, p: bytes) -> bytes:
        try:
            entry = self.server.regnums[hex_number(p[1:])]
        except (ValueError, KeyError):
            return E_INVAL
        if entry.register is None:
            value = self.device.read_core(entry.name)
        else:
            value = self.device.regs.read(entry.register)
        return value.to_bytes(entry.bits // 8, "little").hex().encode()

    def _write_reg(self, p: bytes) -> bytes:
        try:
            num, val = p[1:].split(b"=", 1)
            entry = self.server.regnums[hex_number(num)]
            raw = hex_bytes(val)
        except (ValueError, KeyError):
            return E_INVAL
        if len(raw) != entry.bits // 8:
            return E_INVAL
        value = int.from_bytes(raw, "little")
        try:
            if entry.register is None:
                self.device.write_core(entry.name, value)
            else:
                with self.rc.halted_access("register write"):
                    self.device.write_register(entry.register.name, value)
        except TargetRunning:
            return E_RUNNING
        except (BusError, DeviceError):
            return E_INVAL
        return b"OK"

    # -- memory ---------------------------------------------------------------------------------
    @staticmethod
    def _addr_len(s: bytes) -> tuple[int, int]:
        a, n = s.split(b",", 1)
        return hex_number(a), hex_number(n)

    def _read_bytes(self, addr: int, n: int) -> bytes | None:
        """Up to ``n`` bytes from ``addr``: all of them, or the readable part before the first
        byte that is not (the bus names it), or None if ``addr`` itself is not readable."""
        n = min(n, PACKET_SIZE // 2)
        try:
            return self.device.read(addr, n)
        except BusError as e:
            if not addr < e.address < addr + n:
                return None
            n = e.address - addr
        return self.device.read(addr, n)

    def _read_mem(self, p: bytes) -> bytes:
        try:
            addr, n = self._addr_len(p[1:])
        except ValueError:
            return E_INVAL
        return self._mem_hex(addr, n)

    def _mem_hex(self, addr: int, n: int) -> bytes:
        data = self._read_bytes(addr, n)
        return E_FAULT if data is None else hex_rle(data)

    def _read_bin(self, p: bytes) -> bytes:
        try:
            addr, n = self._addr_len(p[1:])
        except ValueError:
            return E_INVAL
        data = self._read_bytes(addr, n)
        return E_FAULT if data is None else b"b" + escape(data)

    def _write(self, addr: int, data: bytes) -> bytes:
        if not data:
            return b"OK"
        try:
            with self.rc.halted_access("memory write"):
                self.device.write(addr, data)
        except TargetRunning:
            return E_RUNNING
        except BusError:
            return E_FAULT
        except DeviceError:
            return E_INVAL
        return b"OK"

    def _write_mem(self, p: bytes) -> bytes:
        try:
            head, hexdata = p[1:].split(b":", 1)
            addr, n = self._addr_len(head)
            data = hex_bytes(hexdata)
        except ValueError:
            return E_INVAL
        if len(data) != n:
            return E_INVAL
        return self._write(addr, data)

    def _write_bin(self, p: bytes) -> bytes:
        try:
            colon = p.index(b":")
            addr, n = self._addr_len(p[1:colon])
            data = unescape(p[colon + 1:])
        except ValueError:
            return E_INVAL
        if len(data) != n:
            return E_INVAL
        return self._write(addr, data)

    # -- breakpoints and watchpoints --------------------------------------------------------
    def _z_args(self, p: bytes) -> tuple[int, int, int]:
        kind, addr, length = p[1:].split(b";")[0].split(b",")[:3]
        return hex_number(kind), hex_number(addr), hex_number(length)

    def _insert(self, p: bytes) -> bytes:
        """Z0-Z4: the point belongs to this connection (removed when it ends) and must lie in
        one region of the memory map (a breakpoint's kind is its byte length)."""
        try:
            kind, addr, length = self._z_args(p)
        except ValueError:
            return E_INVAL
        if kind > 4:
            return b""
        if not self.device.bus.is_mapped(addr, max(1, length)):
            return E_FAULT
        if kind in (0, 1):
            self.rc.add_breakpoint(addr, owner=self)
        else:
            self.rc.add_watchpoint("wra"[kind - 2], addr, length, owner=self)
        return b"OK"

    def _remove(self, p: bytes) -> bytes:
        try:
            kind, addr, length = self._z_args(p)
        except ValueError:
            return E_INVAL
        if kind in (0, 1):
            self.rc.remove_breakpoint(addr, owner=self)
        elif kind in (2, 3, 4):
            self.rc.remove_watchpoint("wra"[kind - 2], addr, length, owner=self)
        else:
            return b""
        return b"OK"

    # -- queries -----------------------------------------------------------------------------
    def _query(self, p: bytes) -> bytes | None:
        if p.startswith(b"qSupported"):
            offered = p.split(b":", 1)[1].split(b";") if b":" in p else []
            self.binary_upload = b"binary-upload+" in offered
            self.notify = b"accelstub-notify+" in offered
            self.rcmd_errors = b"accelstub-rcmd-errors+" in offered
            feats = [b"PacketSize=%x" % PACKET_SIZE, b"QStartNoAckMode+",
                     b"qXfer:features:read+", b"qXfer:memory-map:read+", b"vContSupported+",
                     b"ReverseStep+", b"ReverseContinue+"]
            if self.binary_upload:
                feats.append(b"binary-upload+")
            if self.notify:
                feats.append(b"accelstub-notify+")
            if self.rcmd_errors:
                feats.append(b"accelstub-rcmd-errors+")
            return b";".join(feats)
        if p.startswith(b"qXfer:"):
            return self._xfer(p)
        if p.startswith(b"qRcmd,"):
            return self._monitor(p[6:])
        if p == b"qAttached":
            return b"1"
        if p == b"qOffsets":
            return b"Text=0;Data=0;Bss=0"
        if p.startswith(b"qSymbol"):
            return b"OK"
        return b""

    def _set_query(self, p: bytes) -> bytes:
        if p == b"QStartNoAckMode":
            self._after_reply = "noack"
            return b"OK"
        return b""

    def _xfer(self, p: bytes) -> bytes:
        parts = p.split(b":")
        if len(parts) != 5 or parts[2] != b"read":
            return b""
        obj, annex = parts[1], parts[3]
        try:
            off, length = self._addr_len(parts[4])
        except ValueError:
            return E_INVAL
        if obj == b"features" and annex == b"target.xml":
            doc = self.server.target_xml
        elif obj == b"memory-map" and annex == b"":
            doc = self.server.memory_map
        else:
            return b"E00" if obj in (b"features", b"memory-map") else b""
        chunk = doc[off:off + min(length, PACKET_SIZE // 2)]
        more = off + len(chunk) < len(doc)
        return (b"m" if more else b"l") + escape(chunk)

    def _monitor(self, hexcmd: bytes) -> bytes:
        try:
            line = hex_bytes(hexcmd).decode("utf-8", "replace")
        except ValueError:
            return E_INVAL
        ctx = self.server.command_context(log=lambda s: self.console(s.rstrip("\n") + "\n"))
        try:
            result = execute(ctx, line)
        except CommandError as e:
            # the message only, as OpenOCD's gdb server has long answered (O packets, then
            # OK): gdb shows an Exx reply to qRcmd as "Protocol error with Rcmd" after the
            # text. accelstub's own client asks for the error (accelstub-rcmd-errors+).
            self.console(str(e).rstrip("\n") + "\n")
            return E_PERM if self.rcmd_errors else b"OK"
        if not result:
            return b"OK"
        return (result.rstrip("\n") + "\n").encode("utf-8", "replace").hex().encode()

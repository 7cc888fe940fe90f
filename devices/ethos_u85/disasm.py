"""``accelstub disasm FILE``: the Ethos-U85 command-stream listing as a command line tool, which
this package contributes to the CLI through its DeviceSpec (devices/device.py DeviceTool), as
it contributes monitor commands through the device: stub/cli.py knows no device's formats."""
from __future__ import annotations

import sys
from pathlib import Path

from ..files import FileRefused, read_bounded
from . import DISASM_TAKES
from .stream import UNKNOWN, decode, listing_lines
from .vela import VelaImportError, config_text, container_kind, find_command_streams

#: largest command stream ``accelstub disasm`` reads (Ethos-U85 command streams are kilobytes)
MAX_DISASM_BYTES = 16 << 20
#: largest Vela output file (model, weights and stream) ``accelstub disasm`` reads
MAX_MODEL_BYTES = 256 << 20
#: a raw file is listed only when its first commands are commands: text, an ELF file or random
#: bytes hit a reserved encoding within a few words, a command stream has none
RAW_CHECK_COMMANDS = 16


def _head(path: Path) -> bytes:
    """The first 8 bytes of a regular file (b"" for pipes and devices, which are read once):
    they say whether the file is a container, which decides the size limit."""
    try:
        if not path.is_file():
            return b""
        with open(path, "rb") as f:
            return f.read(8)
    except OSError:
        return b""


def _not_a_stream(data: bytes, path: str) -> str | None:
    """Why ``data`` is not a raw command stream (its first commands hold a reserved
    encoding, or there is no word), or None."""
    if len(data) < 4:
        return f"{path}: {len(data)} bytes, not one command word"
    for c in decode(data[:4 * (2 * RAW_CHECK_COMMANDS + 1)], count=RAW_CHECK_COMMANDS):
        if c.name == UNKNOWN:
            return (f"{path}: not an Ethos-U85 command stream: the command at offset "
                    f"{c.offset:#x} (word {c.words[0]:#010x}) is a reserved encoding "
                    f"({c.error}); accelstub disasm takes {DISASM_TAKES}")
    return None


def disasm(path: str) -> int:
    """List the command stream of ``path`` (a raw stream, or the one inside Vela's output:
    vela.find_command_streams), chunk by chunk (stream.listing_lines): a listing holds an
    object per word, so a large file listed at once ran out of memory. A raw file longer than
    MAX_DISASM_BYTES (a container: MAX_MODEL_BYTES) is refused before any output, and so is a
    file that is no command stream: listing it would print garbage."""
    head = _head(Path(path))
    container = container_kind(head) is not None
    limit, text = ((MAX_MODEL_BYTES, f"{MAX_MODEL_BYTES} bytes (256 MiB) of Vela output are read")
                   if container else
                   (MAX_DISASM_BYTES, f"{MAX_DISASM_BYTES} bytes (16 MiB) are disassembled"))
    try:
        data = read_bounded(Path(path), limit, text, regular_only=False)
        found = find_command_streams(data, path)
    except (FileRefused, VelaImportError) as e:
        print(f"accelstub: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"accelstub: error: cannot read {path}: {e.strerror}", file=sys.stderr)
        return 2
    if found is None:
        why = _not_a_stream(data, path)
        if why:
            print(f"accelstub: error: {why}", file=sys.stderr)
            return 2
        parts = [("", data)]
    else:
        parts = [(f"# {f.where}: {len(f.words) // 4} command words at payload offset "
                  f"{f.payload_offset:#x} (offsets below are QREAD values); "
                  f"{config_text(f.config)}", f.words) for f in found]
    try:
        for header, words in parts:
            _list(header, words, path)
    except BrokenPipeError:
        pass
    return 0


def _list(header: str, data: bytes, path: str) -> None:
    """Print one stream's listing (a header line first if any), and warn on stderr about
    reserved encodings inside it and a trailing partial word."""
    batch: list[str] = [header] if header else []
    unknown: list[str] = []
    for line in listing_lines(data):
        if "  UNKNOWN " in line and len(unknown) < 1:
            unknown.append(line.split(":", 1)[0])
        batch.append(line)
        if len(batch) >= 4096:
            sys.stdout.write("\n".join(batch) + "\n")
            batch.clear()
    if batch:
        sys.stdout.write("\n".join(batch) + "\n")
    if unknown:
        print(f"accelstub: warning: {path}: reserved encodings (UNKNOWN) from offset "
              f"{unknown[0]} on: the NPU stops there with cmd_parse_error", file=sys.stderr)
    if len(data) % 4:
        print(f"accelstub: warning: {path}: {len(data) % 4} trailing byte(s) are not a "
              f"command word", file=sys.stderr)

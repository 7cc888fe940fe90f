"""MAX78000 monitor commands (``monitor layers``, ``mlat``, ``cnn``), beside the shared OpenOCD
table. Each takes the device model (duck-typed: nothing here imports model.py)."""
from __future__ import annotations

from functools import partial

from ..device import MonitorCommand
from ..errors import DeviceError
from .fifo import FIFO_DEPTH, FIFOS
from .listing import LAYERS_HELP, layers_text

QUADRANTS = 4


def commands(dev) -> dict[str, MonitorCommand]:
    return {"layers": MonitorCommand("", partial(_layers, dev), LAYERS_HELP),
            "mlat": MonitorCommand("[quadrant [count]]", partial(_mlat, dev),
                                   "read CNNx16_n_MLAT as the CPU does (advances the Mlator); "
                                   "a debugger read of MLAT does not advance it"),
            "cnn": MonitorCommand("fifo | test | warnings [clear]", partial(_cnn, dev),
                                  "FIFO levels, BIST/zeroize status (bistsel), model warnings")}


def _layers(dev, ctx, args: list[str]) -> str:
    if args:
        raise dev.usage_error("layers")
    return layers_text(dev)


def _mlat(dev, ctx, args: list[str]) -> str:
    try:
        q = int(args[0], 0) if args else 0
        n = int(args[1], 0) if len(args) > 1 else 1
    except ValueError:
        raise dev.usage_error("mlat") from None
    if len(args) > 2:
        raise dev.usage_error("mlat")
    if not 0 <= q < QUADRANTS or not 1 <= n <= 4096:
        raise DeviceError(f"quadrant {q}, count {n}: the quadrant is 0-{QUADRANTS - 1}, the "
                          "count 1-4096")
    if not dev.memory_control.mlat_loaded[q]:
        raise DeviceError(f"mlat: the Mlator of quadrant {q} is not loaded (write "
                          f"CNNx16_{q}_CTRL.mlat_ld 0->1 first)")
    addr = dev.description.register(f"CNNx16_{q}_MLAT").address
    return "\n".join(f"0x{addr:08x}: {int.from_bytes(dev.host_read(addr, 4), 'little'):08x}"
                     for _ in range(n))


def _cnn(dev, ctx, args: list[str]) -> str:
    if args == ["fifo"]:
        f = dev.fifos
        return "\n".join(f"fifo{n}: enabled {(f.enabled() >> n) & 1}, {len(f.q[n])}/{FIFO_DEPTH} "
                         f"words, {len(f.staged[n])} bytes taken by the engine, {f.dropped[n]} "
                         "dropped" for n in range(FIFOS))
    if args == ["test"]:
        return "\n".join(f"q{q}: {dev.memory_control.bist_status(q)}" for q in range(QUADRANTS))
    if args and args[0] == "warnings" and len(args) <= 2:
        text = "\n".join(dev.warnings) or "no warnings"
        if args[1:] == ["clear"]:
            dev.warnings.clear()
        return text
    raise dev.usage_error("cnn")

"""Operators Vela leaves on the CPU (issue 28 point 5), run as TensorFlow Lite Micro runs them on
the Cortex-M beside the NPU: LiteRT's reference kernels (BUILTIN_REF, the kernels TFLM has),
reading their inputs from and writing their outputs to the arena where Vela's memory plan
(OfflineMemoryAllocation) put them, between the NPU's command streams.

Each CPU operator is one unit of the device (design notes "Ethos-U85: operators Vela leaves on
the CPU"): its pc is word k of the emu_program window (k = its position among the program's
CPU operators), it reads and writes device memory only through the bus, so watchpoints, the
tensor view and ``run -v`` see it like an NPU operation. LiteRT runs the operator alone from
the model's own bytes (framework_reference._op_alone), so its options, constant operands and
quantization are exactly the model's.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..errors import DeviceError

if TYPE_CHECKING:
    from ..device import Device
    from .vela import TensorSlot


class Interpreter(Protocol):
    """What a CPU operator uses of LiteRT's ``Interpreter`` (typed here: LiteRT ships no
    type information)."""

    def set_tensor(self, index: int, value: np.ndarray) -> None: ...
    def invoke(self) -> None: ...
    def get_tensor(self, index: int) -> np.ndarray: ...


@dataclass
class CpuOperator:
    """Operator ``index`` of a ``*_vela.tflite`` that Vela left on the CPU: its arena tensors
    (``inputs``/``outputs``: TensorSlots, addresses set at placement; constant operands stay in
    the model) and the LiteRT interpreter that runs it alone."""

    index: int
    name: str  # BuiltinOperator name ("NEG")
    inputs: list[TensorSlot]  # arena tensors it reads, in operator order
    outputs: list[TensorSlot]  # arena tensors it writes
    input_ids: list[int]  # their tensor indexes in the model (LiteRT's tensor indexes)
    output_ids: list[int]
    interpreter: Interpreter = field(repr=False)

    def summary(self) -> str:
        """The listing's line: what runs, on which tensors."""
        def shapes(slots: list[TensorSlot]) -> str:
            return ", ".join(f"{'x'.join(map(str, t.shape))} {t.dtype}" for t in slots) or "-"
        return (f"{self.name} (TFLite operator {self.index}) on the CPU, LiteRT reference "
                f"kernel: {shapes(self.inputs)} -> {shapes(self.outputs)}")

    def run(self, device: Device, read: Callable[[int, int], None],
            wrote: Callable[[int, int], None]) -> None:
        """Read the inputs from ``device`` memory, run the kernel, write the outputs back;
        ``read``/``wrote``(start, end) record what was touched (watchpoints)."""
        it = self.interpreter
        try:
            for t, i in zip(self.inputs, self.input_ids):
                raw = device.read(t.address, t.nbytes)
                read(t.address, t.address + t.nbytes)
                it.set_tensor(i, np.frombuffer(raw, t.dtype).reshape(t.shape).copy())
            it.invoke()
            for t, i in zip(self.outputs, self.output_ids):
                y = np.ascontiguousarray(it.get_tensor(i), dtype=t.dtype)
                device.write(t.address, y.tobytes())
                wrote(t.address, t.address + t.nbytes)
        except (ValueError, RuntimeError) as e:
            raise DeviceError(f"CPU operator {self.name} (TFLite operator {self.index}): "
                              f"LiteRT failed ({' '.join(str(e).split())})") from None

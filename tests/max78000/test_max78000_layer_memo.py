"""MAX78000's layer decodes are memoised on the registers they read (devices/max78000/model.py
layer_config): a dataset run decodes each layer once, not at every inference (a run decodes
with CTRL.cnn_en set, the listing after it with CTRL.cnn_irq set too: the last two decodes are
kept, issue 31 #2), and a changed register is decoded again."""
from __future__ import annotations

from unittest.mock import patch

import numpy as np

from accelstub.devices.max78000 import model as M
from accelstub.evaluation import Evaluator


def test_a_dataset_run_decodes_each_layer_once_and_a_changed_register_again():
    ev = Evaluator("max78000", None)
    try:
        dev = ev.session.backend.device
        x = np.zeros(ev.input.shape, ev.input.dtype)
        first = ev.run(x)  # the decodes of this register state are kept from here on
        decodes = []
        real = M.decode_layer

        def counted(peek, quadrants, y):
            decodes.append(y)
            return real(peek, quadrants, y)
        with patch.object(M, "decode_layer", counted):
            for _ in range(4):
                assert np.array_equal(ev.run(x), first)
            assert decodes == []  # run and listing alternate: both kept
            reg = dev.description.register("CNNx16_0_L0_WPTR_BASE")
            before = dev.layer_config(0).wptr_base
            dev.regs.poke(reg, dev.regs.peek(reg) ^ 0x40)
            assert dev.layer_config(0).wptr_base == before ^ 0x40 and decodes == [0]
    finally:
        ev.close()

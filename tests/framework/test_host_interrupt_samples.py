"""HostProgram._take_interrupts returns at once when no line moved and none pulsed (issue 31
#2); every rise, every fall (the next rise is an event again) and every pulse is still taken,
one pending event and one ISR run each, as when each sample was worked out in full."""
from accelstub.devices.host import Call, HostProgram

from .test_host_quiet_steps import Lines


def test_rises_falls_and_pulses_are_each_taken_once_and_a_quiet_sample_changes_nothing():
    dev = Lines()
    isr = {"IRQ": [], "EVT": []}
    hp = HostProgram("p", [], isr={line: [Call(lambda hp, line=line: isr[line].append(1))]
                                   for line in isr})
    hp.start(dev)
    # (what the device does before the sample, pending IRQ and EVT events after it)
    script = [
        (lambda: None, 0, 0),                          # nothing moved
        (lambda: setattr(dev, "level", True), 1, 0),   # a rise: one event
        (lambda: None, 1, 0),                          # still high: no event
        (lambda: setattr(dev, "level", False), 1, 0),  # a fall: no event, remembered
        (lambda: setattr(dev, "level", True), 2, 0),   # so this rise is one
        (lambda: setattr(dev, "pulses", 3), 2, 3),     # three pulses at once
        (lambda: None, 2, 3),
        (lambda: setattr(dev, "pulses", 1), 2, 3),     # a count going back (a rewind): none
        (lambda: setattr(dev, "pulses", 2), 2, 4),     # counted from where it went back to
    ]
    for n, (act, irq, evt) in enumerate(script):
        act()
        hp._take_interrupts()
        assert (hp.pending["IRQ"], hp.pending["EVT"]) == (irq, evt), n
        assert (len(isr["IRQ"]), len(isr["EVT"])) == (irq, evt), n
        assert hp.levels == {"IRQ": dev.level} and hp.pulses == {"EVT": dev.pulses}, n

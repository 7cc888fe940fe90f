"""Host programs sample the interrupt lines after a step only where the step can have moved
them (Step.quiet, issue 31 #2), and a sample with no new pulse costs one comparison: the events
the program sees are the same as sampling after every step."""
from accelstub.devices.host import Call, Check, CheckResult, HostProgram, WaitIrq


class Lines:
    """The interrupt side of a device: one level line and one pulsed line, samples counted."""

    def __init__(self) -> None:
        self.level = False
        self.pulses = 0
        self.samples = 0

    def interrupts(self) -> dict[str, bool]:
        self.samples += 1
        return {"IRQ": self.level}

    def interrupt_counts(self) -> dict[str, int]:
        return {"EVT": self.pulses}

    def program_started(self, host: HostProgram) -> None:
        pass


def _raise_level(hp: HostProgram) -> None:
    hp.device.level = True


def _pulse_twice(hp: HostProgram) -> None:
    hp.device.pulses += 2


def test_quiet_steps_are_not_followed_by_a_sample_and_events_are_not_lost():
    dev = Lines()
    passed = CheckResult(True, "PASS")
    hp = HostProgram("p", [
        Call(_raise_level),                        # not quiet: sampled, IRQ rose
        WaitIrq("IRQ"),                            # quiet: consumes the pending event
        Check(lambda hp: passed, quiet=True),      # quiet: not sampled
        Call(_pulse_twice),                        # sampled: two pulses, two events
        WaitIrq("EVT"), WaitIrq("EVT"),
        Check(lambda hp: passed),                  # not declared quiet: sampled
    ])
    hp.start(dev)
    after_start = dev.samples
    assert hp.advance()
    assert hp.finished and hp.results == [passed, passed]
    assert dev.samples - after_start == 3  # the two Calls and the undeclared Check
    assert hp.pending["IRQ"] == 0 and hp.pending["EVT"] == 0
    assert hp.pulses == {"EVT": 2}


def test_a_check_not_declared_quiet_that_moves_a_line_runs_its_isr():
    """Checks are not quiet by default: a driver's read may have side effects, and a line it
    moves is taken as before."""
    dev = Lines()
    isr_ran = []
    hp = HostProgram("p", [Check(lambda hp: _raise_level(hp))],
                     isr={"IRQ": [Call(lambda hp: isr_ran.append(True))]})
    hp.start(dev)
    hp.advance()
    assert isr_ran == [True] and hp.pending["IRQ"] == 1

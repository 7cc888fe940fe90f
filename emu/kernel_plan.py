"""Compile a known list of kernels before a program needs them, in two processes at once.

Why: numba compiles a kernel on its first call, one function at a time per process (its
compiler lock), so a first run on a 2-core machine used one core: the MAX78000 demo's
kernels took ~2 s of CPU one after the other (issue 31 #5). When the kernels and their
argument types are known before the run (a *plan*: (module, function, numba signature)
entries, e.g. a device's DeviceSpec.kernel_plan, checked by a test against a run of its
demo), the ones not in the disk cache are split between this process and one worker forked
for it. The worker writes numba's on-disk cache (emu/kernel_cache.py: the same folder, keyed by
function and argument types), from which this process then loads them, as a later run would.
Nothing is started when everything is cached (a warm run pays a cache lookup per entry, which
its first calls would have paid anyway), where one core is all there is, or where a fork is
not safe (can_fork): there this process compiles them all, as before.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence

import numba
from numba.core import config as numba_config
from numba.core import sigutils
from numba.core.compiler_lock import global_compiler_lock

from .jit import KERNELS, argument_type, interpreted

#: (module, function, signature as numba prints it, CPU seconds it took to compile on the
#: reference machine (used only to share the work out), the machines that call it: a key of
#: NEEDS)
Entry = tuple[str, str, str, float, str]


#: the signature of an entry compiled by calling a function of its module, with no arguments,
#: named after it (``call compile_ahead``): for a kernel whose argument types its module
#: builds itself and may change (emu/executor/ethosu85.py run_rows), so no copy of them here
#: can go stale. Such an entry is never known to be cached: it is called (a cached kernel
#: loads in ~0.2 s). Words after the function's name are its string arguments (``call demo
#: ne16``: stub/precompile.py queues each planless device's demo run beside the kernels)
CALL = "call "


def _vnni() -> bool:
    from .conv.vnni import HAVE_VNNI

    return HAVE_VNNI


#: which machines call a kernel: every one (""), those where the 8-bit convolutions run the
#: byte kernel ("vnni": AVX-512 VNNI, emu/conv/int_conv.py), the others ("int16"); "ahead":
#: every one, but compiled only ahead of a run (`accelstub compile`, :func:`compile_plan`'s
#: ``then``), never by a run's own plan: a kernel the demo runs interpreted while its work is
#: small (:func:`tiered`), which a larger program finds compiled
AHEAD = "ahead"
NEEDS = {"": lambda: True, "vnni": _vnni, "int16": lambda: not _vnni(), AHEAD: lambda: True}


def for_this_machine(plan: Sequence[Entry]) -> list[Entry]:
    """The entries of ``plan`` this machine's runs call."""
    return [e for e in plan if NEEDS[e[4]]()]


#: seconds the forked worker starts behind this process (the fork, and set-up its first
#: compile repeats); its share is made that much smaller (a rough figure: it only shares out
#: the work)
WORKER_START_S = 0.1


def kernel(module: str, name: str):
    """The dispatcher ``name`` of ``module`` (importing it), as emu/jit.py recorded it."""
    importlib.import_module(module)
    try:
        return KERNELS[module, name]
    except KeyError:
        raise KeyError(f"kernel plan: no kernel {module}.{name}") from None


def _args(signature: str) -> tuple:
    """The argument types of a signature as numba prints it (``(int64, Array(...))``): numba
    parses its own spelling. A tuple of types is also the key numba files a call under."""
    return tuple(sigutils.normalize_signature(signature)[0])


def load_cached(dispatcher, signature: str) -> bool:
    """Give ``dispatcher`` its compiled ``signature`` from numba's disk cache, if it is there,
    never compiling; whether it has it now. The steps are those of numba's own
    ``Dispatcher.compile`` on a cache hit (numba offers no public call that loads without
    compiling on a miss); tests/framework/test_kernel_plan.py checks them. A numba whose
    internals differ (no such steps) gives False: the entry is then compiled, or loaded by
    numba's own first call, as without a plan."""
    return load_types(dispatcher, _args(signature))


def load_types(dispatcher, args: tuple) -> bool:
    """:func:`load_cached` for the argument types ``args`` (numba types, as numba keys its
    overloads): also for a caller that has the arguments, not a plan's signature
    (:func:`tiered`)."""
    if args in dispatcher.overloads:
        return True
    load = getattr(getattr(dispatcher, "_cache", None), "load_overload", None)
    if load is None or not hasattr(dispatcher, "_cache_hits"):
        return False
    with global_compiler_lock:
        cres = load(args, dispatcher.targetctx)
        if cres is None:
            return False
        dispatcher._cache_hits[args] += 1  # as numba counts it (Dispatcher.stats)
        dispatcher.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
        dispatcher.add_overload(cres)
    return True


#: seconds of interpreted kernel work (:func:`tiered`) one process may spend on kernels that
#: are neither compiled nor cached, before it compiles them as it otherwise would: the
#: Ethos-U85 demo's weight decoding and AXI accounting take ~0.1 s that way, their compiles
#: ~3 s of CPU (issue 31 #5)
INTERPRET_BUDGET_S = 0.15
_budget_left = [INTERPRET_BUDGET_S]
_NOT_CACHED: set = set()  # kernels whose disk cache had no version for their arguments


def tiered(kernel, cost_s: float, *args) -> Callable:
    """``kernel``, or its interpreted form (emu/jit.py ``interpreted``: the same code) while
    it is neither compiled in this process nor in numba's disk cache for the types of
    ``args`` (looked up once per process) and the call's estimated ``cost_s`` fits what is
    left of the process's :data:`INTERPRET_BUDGET_S`. Why: a program that gives a kernel
    little work (the bundled Ethos-U85 demo: 4640 weights) is done interpreting it before
    numba would have compiled it; a larger program interprets at most the budget, then
    compiles as before; after `accelstub compile` (such kernels' plan entries are
    :data:`AHEAD`) every run loads them. The arguments' types as numba's ``typeof`` gives
    them, by :func:`argument_type` for arrays (numba's would import numpy.ma, ~7 ms of a warm
    Ethos-U85 run, issue 31 #5)."""
    if kernel.overloads or cost_s > _budget_left[0]:
        return kernel
    if kernel not in _NOT_CACHED:
        kinds = tuple(t if (t := argument_type(a)) is not None else numba.typeof(a)
                      for a in args)
        if load_types(kernel, kinds):
            return kernel
        _NOT_CACHED.add(kernel)
    _budget_left[0] -= cost_s
    return interpreted(kernel)


#: numba's optimisation level (NUMBA_OPT, numba's own default 3) for the kernels of these
#: plan entries (module, function) where a plan compiles them (:func:`compile_entries`): kernels
#: that run once per program or rarely, whose LLVM passes at level 3 cost more CPU in
#: `accelstub compile` than their lower-level code ever costs at run time (issue 31 #5; design
#: notes "Cheaper optimisation for kernels that run once"). A kernel compiled at a lower level is
#: filed in the disk cache as any other (numba's cache key has no optimisation level), so later
#: runs load it; one compiled by its first call in a run gets numba's level.
OPT_LEVELS: dict[tuple[str, str], int] = {
    # the Ethos-U85 weight stream order: once per layer as a program is loaded, memoised
    # (weights.ethosu85 decode_weights_memo)
    ("accelstub.emu.weights.ethosu85", "_walk"): 1,
    # the Ethos-U85 weight decoder: once per weight stream as a program is loaded, memoised
    ("accelstub.emu.weights.ethosu85", "_swd_decode"): 1,
    # the Ethos-U85 AXI burst counter: a unit's accounting, a few hundred ranges
    ("accelstub.emu.memory.ethosu85_axi", "_burst_counts"): 1,
    # the Ethos-U85 executor's row loop (stub/precompile.py AHEAD, a CALL entry): its heavy
    # work is in the kernels it calls through their addresses, compiled apart at numba's level
    ("accelstub.emu.executor.ethosu85", "run_rows"): 1,
}


@contextlib.contextmanager
def optimised_at(module: str, name: str) -> Iterator[None]:
    """numba's optimisation level set to ``OPT_LEVELS[module, name]`` (if it names one) while
    this compiles that entry, numba's own restored after it, also on an error. numba reads
    ``config.OPT`` each time it builds an LLVM pass manager (numba/core/codegen.py
    ``_pass_builder``), so the level is per compile. Under numba's compiler lock: no other
    thread's compile runs meanwhile at this level."""
    level = OPT_LEVELS.get((module, name))
    if level is None:
        yield
        return
    with global_compiler_lock:
        before = numba_config.OPT
        numba_config.OPT = type(before)(level)  # numba's _OptLevel, an int
        try:
            yield
        finally:
            numba_config.OPT = before


def compile_entries(entries: Sequence[Sequence],
                    done: Callable[[str, str, float], None] | None = None) -> None:
    """Compile (or load from the cache) each entry in this process, at its optimisation level
    (:data:`OPT_LEVELS`); ``done(module, function, seconds)`` after each."""
    for module, name, signature, *_ in entries:
        t0 = time.perf_counter()
        with optimised_at(module, name):
            if signature.startswith(CALL):
                function, *args = signature.removeprefix(CALL).split()
                getattr(importlib.import_module(module), function)(*args)
            else:
                kernel(module, name).compile(_args(signature))
        if done is not None:
            done(module, name, time.perf_counter() - t0)


def _loaded(entry: Entry) -> bool:
    """Whether ``entry``'s kernel is compiled in this process now, loading it from the disk
    cache if it is there; a :data:`CALL` entry never is (it is always called)."""
    return not entry[2].startswith(CALL) and load_cached(kernel(entry[0], entry[1]), entry[2])


def _by_function(entries: Sequence[Entry],
                 together: Mapping[tuple[str, str], str] | None = None) -> list[list[Entry]]:
    """``entries`` grouped by (module, function), groups and entries in the order given: one
    function's entries must stay in one process (:func:`share`, :func:`_queue`). Functions
    that ``together`` maps to one name form one group: they share costly callees, which the
    first compiles and the next finds compiled in its process (compiled in two processes at
    once, each compiled them: ~1.7 s of CPU for the Ethos-U85 element-wise and pooling
    kernels, issue 31 #5)."""
    groups: dict[tuple[str, str] | str, list[Entry]] = {}
    for e in entries:
        function = (e[0], e[1])
        groups.setdefault((together or {}).get(function, function), []).append(e)
    return list(groups.values())


def share(entries: Sequence[Entry]) -> tuple[list[Entry], list[Entry]]:
    """(this process's, the worker's): the longest first, each to the side that finishes it
    sooner, the worker starting :data:`WORKER_START_S` late. The entries of one function stay
    on one side: two processes adding to one function's cache index could lose an entry."""
    here: list[Entry] = []
    there: list[Entry] = []
    load = [0.0, WORKER_START_S]
    for group in sorted(_by_function(entries), key=lambda g: -sum(e[3] for e in g)):
        side = 0 if load[0] <= load[1] else 1
        (here, there)[side].extend(group)
        load[side] += sum(e[3] for e in group)
    return here, there


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether this process may start a worker by fork: a POSIX system other than macOS (whose
    system libraries are not fork-safe) and no thread but this one (a forked child has only
    the forking thread; a lock another thread held, numba's compiler lock for one, would stay
    held in it)."""
    return hasattr(os, "fork") and sys.platform != "darwin" and threading.active_count() == 1


def _queue(then: Sequence[Entry], together: Mapping[tuple[str, str], str] | None = None
           ) -> tuple[int, list[list[Entry]]]:
    """A job queue for the entries of ``then``: the read end of a pipe holding one byte per
    function, an index into the groups returned (a function's entries, in the order of
    ``then``; the functions ``together`` names alike, one group: :func:`_by_function`), the
    write end closed (so a read of the emptied pipe returns nothing). Each process that has
    finished its share reads the next byte and compiles that group: it goes to whichever
    process is free first (a pipe's one-byte read is atomic); one function's entries stay in
    one process, as in :func:`share`."""
    groups = _by_function(then, together)
    assert len(groups) < 256, "a kernel plan's queue holds at most 255 functions"
    read, write = os.pipe()
    os.write(write, bytes(range(len(groups))))
    os.close(write)
    return read, groups


def _compile_queued(queue: tuple[int, list[list[Entry]]],
                    done: Callable[[str, str, float], None] | None = None) -> list[Entry]:
    """Compile the groups of ``queue`` this process takes from it, one at a time; an entry
    the other process has put in the disk cache meanwhile (a kernel another one calls,
    compiled inside it) is loaded, and not reported to ``done`` as compiled. Returns the
    entries taken."""
    read, groups = queue
    taken = []
    while byte := os.read(read, 1):
        taken += groups[byte[0]]
        compile_entries([e for e in groups[byte[0]] if not _loaded(e)], done)
    return taken


#: whether this process is a worker :func:`_start_worker` forked (a queued job that fails
#: raises there, so the worker does not report it and the job is run again in the process
#: that forked it, which says why: stub/precompile.py demo)
_WORKER = [False]


def in_worker() -> bool:
    """Whether this process is a forked compile worker."""
    return _WORKER[0]


def _start_worker(entries: list[Entry], queue: tuple[int, list[list[Entry]]] | None,
                  quiet: bool = True) -> tuple[int, int]:
    """Fork a worker that compiles ``entries`` into the disk cache, then what it takes from
    ``queue`` (:func:`_queue`), writing a JSON line [module, function, seconds] after
    each to a pipe, and exits (0 if all compiled); its pid and the pipe's read end.
    ``quiet``: its output goes nowhere.

    Why fork: a forked worker has numba, its registry and our modules loaded already; a
    worker started as a new Python process spent ~0.8 s CPU on that before compiling anything,
    as much as it then compiled (issue 31 #5)."""
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    with global_compiler_lock:  # no compile half done in the child
        pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    code = 1
    try:  # the worker: when quiet, nothing it prints reaches the user's terminal
        _WORKER[0] = True
        os.close(read)
        if quiet:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
        with os.fdopen(write, "w") as report:
            def done(*kernel) -> None:
                print(json.dumps(kernel), file=report, flush=True)

            compile_entries(entries, done)
            if queue is not None:
                _compile_queued(queue, done)
        code = 0
    finally:
        os._exit(code)  # no atexit handlers, no flush of the parent's buffers


def compile_plan(plan: Sequence[Entry],
                 on_worker: Callable[[str, str, float], None] | None = None,
                 then: Sequence[Entry] = (), worker_output: bool = False,
                 load: bool = True,
                 together: Mapping[tuple[str, str], str] | None = None) -> list[Entry]:
    """Have every entry of ``plan`` and ``then`` compiled and loaded in this process: the
    cached ones loaded, the others compiled here and, on a machine with more than one core
    where :func:`can_fork`, in one worker process at the same time; entries for other
    machines (NEEDS) are left out, and so are ``plan``'s :data:`AHEAD` entries (a run's plan
    does not compile them). ``plan`` is shared out before the start (:func:`share`);
    ``then`` comes after it, each function's entries to whichever process is free first (a
    queue, in the order given): a kernel that calls kernels of ``plan`` then finds most of
    them in the disk cache instead of compiling them a second time, and the longest need not
    wait for the end of one process's share (`accelstub compile` gives the Ethos-U85
    executor, which reaches its kernels through their addresses, as ``plan`` and its kernels
    in ``then``). Returns the
    entries that were not cached. ``on_worker(module, function, seconds)``: called, once the
    worker has finished, for each kernel it compiled (`accelstub compile`'s progress lines;
    this process's own compiles are numba's compile events as usual). ``worker_output``: the
    worker's output goes where this process's goes, not nowhere (`accelstub compile`'s
    children: the worker's compile events are printed as they happen, by the listener it
    inherits, to the file the parent reads as it grows, rather than at its end). ``load``
    False: what the worker reported done is left in the disk cache, neither loaded nor
    called again here (`accelstub compile`'s child needs the cache filled, not the kernels:
    loading them again, calling the executor's compile_ahead and running queued demos a
    second time took ~0.3-0.5 s of one core at its end, issue 31 #5); what it did not report
    (it failed) is still done here; nor is ``then`` probed before the queue starts (each
    process loads what is cached of the jobs it takes: the child's ~0.3 s of probes and
    module imports had delayed the fork), so all of it is returned. ``together``: functions
    of ``then`` that share costly callees, each set one job of the queue
    (:func:`_by_function`)."""
    def uncached(entries: Sequence[Entry]) -> list[Entry]:
        return [e for e in for_this_machine(entries) if not _loaded(e)]

    missing = uncached([e for e in plan if e[4] != AHEAD])
    # without load, ``then`` is not probed here before the fork: each process probes the
    # jobs it takes (_compile_queued), and the worker starts that much sooner
    later = uncached(then) if load else for_this_machine(then)
    parallel = len(missing) + len(later) > 1 and cores() > 1 and can_fork()
    here, there = share(missing) if parallel else (missing, [])
    queue = _queue(later, together) if parallel and later else None
    worker = (_start_worker(there, queue, quiet=not worker_output)
              if there or queue is not None else None)
    compile_entries(here)
    taken: list[Entry] = []
    if queue is not None:
        taken = _compile_queued(queue)
        os.close(queue[0])
    else:
        compile_entries(later)
    if worker is not None:
        pid, read = worker
        with os.fdopen(read) as reports:
            lines = reports.read().splitlines()  # until the worker exits
        os.waitpid(pid, 0)
        told = [json.loads(line) for line in lines]
        for kernel_done in told if on_worker is not None else ():
            on_worker(*kernel_done)
        rest = there + (later if queue is not None else [])
        if not load:  # only what neither process did: the worker reports each entry it
            # compiled or called (where it found one cached, one of that function's is
            # loaded here again: harmless)
            done = Counter((m, n) for m, n, _ in told)  # a function's entries, in order
            left = []
            for e in rest:
                if e in taken:
                    continue
                if done[e[0], e[1]]:
                    done[e[0], e[1]] -= 1
                else:
                    left.append(e)
            rest = left
        # loaded from the cache the worker wrote (compiled here if it failed)
        compile_entries(rest)
    return missing + later

"""accelstub.emu.kernel_plan (issue 31 #5): the kernels of a plan not in numba's disk cache are
compiled half here, half in one forked worker, and then loaded from the cache the worker wrote;
with everything cached nothing is compiled and no worker starts. Each case runs in a fresh
process with a numba cache of its own (NUMBA_CACHE_DIR in tmp_path), never the shared one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from accelstub.emu import kernel_plan as KP

#: a module of four small kernels, written to tmp_path (numba caches only functions of a file)
KERNELS_SOURCE = '''
import numpy as np
from accelstub.emu.jit import njit

@njit(nogil=True, cache=True)
def add(a, b):
    return a + b

@njit(nogil=True, cache=True)
def total(x):
    s = 0
    for v in x:
        s += v
    return s

@njit(nogil=True, cache=True)
def scale(x, k):
    for i in range(x.size):
        x[i] *= k

@njit(nogil=True, cache=True)
def largest(x):
    m = x[0]
    for v in x:
        m = max(m, v)
    return m

@njit(nogil=True, cache=True)
def negate(x):
    return -x

def compile_negate():
    """The module's own way to compile negate (a kernel_plan.CALL entry)."""
    negate(np.zeros(3, np.int16))

def mark(word):
    """A CALL job that records which process ran it (calls.txt: word, pid)."""
    import os, time
    with open("calls.txt", "a") as f:
        f.write(f"{word} {os.getpid()}\\n")
    time.sleep(0.2)  # (so that both processes take jobs)

def fails_in_worker():
    """A CALL job that fails where a forked worker runs it (as a failed demo does)."""
    from accelstub.emu import kernel_plan as KP
    mark("fails")
    if KP.in_worker():
        raise RuntimeError("failed in the worker")
'''

PLAN = [
    ("plan_kernels", "add", "(int64, int64)", 0.2, ""),
    ("plan_kernels", "total", "(Array(int64, 1, 'C', False, aligned=True),)", 0.4, ""),
    ("plan_kernels", "scale", "(Array(int64, 1, 'C', False, aligned=True), int64)", 0.3, ""),
    ("plan_kernels", "largest", "(Array(int32, 1, 'C', False, aligned=True),)", 0.3, ""),
]

#: the child: compile_plan(PLAN) (with a worker that fails at once if asked), then each
#: kernel's cache hits and misses in this process (a miss: compiled here; a hit: loaded from
#: the disk cache) and the kernels' results
CHILD = textwrap.dedent('''
    import json, os, sys
    import numpy as np
    from accelstub.emu import kernel_plan as KP
    import plan_kernels as K
    plan, failing = json.loads(sys.argv[1]), sys.argv[2] == "failing"
    then = [tuple(e) for e in json.loads(sys.argv[3])]
    if failing:  # the forked worker dies before compiling anything
        parent, compile_entries = os.getpid(), KP.compile_entries
        def entries_or_die(*args, **kwargs):
            if os.getpid() != parent:
                os._exit(3)
            compile_entries(*args, **kwargs)
        KP.compile_entries = entries_or_die
    reported = []
    missing = KP.compile_plan([tuple(e) for e in plan],
                              on_worker=lambda m, n, s: reported.append([m, n, s > 0]),
                              then=then)
    x = np.arange(5, dtype=np.int64)
    K.scale(x, 3)
    stats = {n: (sum(K.__dict__[n].stats.cache_hits.values()),
                 sum(K.__dict__[n].stats.cache_misses.values()))
             for n in ["add", "total", "scale", "largest"] + [e[1] for e in then
                                                              if e[1] == "negate"]}
    print(json.dumps(dict(missing=[e[1] for e in missing], stats=stats, reported=reported,
                          results=[int(K.add(2, 3)), int(K.total(x)), x.tolist(),
                                   int(K.largest(np.array([4, -2, 9], np.int32)))])))
''')


def run_plan(tmp_path, worker: str = "", plan=PLAN, then=()) -> dict:
    (tmp_path / "plan_kernels.py").write_text(KERNELS_SOURCE)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(tmp_path)] + [
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(plan), worker,
                          json.dumps(then)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def parallel() -> bool:
    """Whether a plan's child process forks a worker on this machine."""
    return KP.cores() > 1 and hasattr(os, "fork") and sys.platform != "darwin"


RESULTS = [5, 30, [0, 3, 6, 9, 12], 9]


def test_uncached_kernels_are_compiled_half_here_half_in_a_worker_then_all_cached(tmp_path):
    here, there = KP.share([tuple(e) for e in PLAN]) if parallel() else (PLAN, [])
    assert here and (there or not parallel())  # one core, or no fork: no worker
    first = run_plan(tmp_path)
    assert first["results"] == RESULTS
    assert sorted(first["missing"]) == sorted(e[1] for e in PLAN)
    # compiled here: one miss; compiled by the worker: one hit, loaded from what it wrote
    assert {n for n, (hits, misses) in first["stats"].items() if misses == 1 and not hits} \
        == {e[1] for e in here}
    assert {n for n, (hits, misses) in first["stats"].items() if hits == 1 and not misses} \
        == {e[1] for e in there}
    # the worker's kernels, each with its time, for `accelstub compile`'s lines
    assert first["reported"] == [["plan_kernels", e[1], True] for e in there]
    second = run_plan(tmp_path)  # a warm run: every kernel loaded, nothing compiled
    assert second["results"] == RESULTS
    assert second["missing"] == [] and second["reported"] == []
    assert all(stats == [1, 0] for stats in second["stats"].values())


#: negate, compiled by calling its module's compile_negate
CALLED = ("plan_kernels", "negate", KP.CALL + "compile_negate", 0.3, "")


def test_queued_kernels_are_each_compiled_once_by_whichever_process_is_free(tmp_path):
    """compile_plan's ``then``: each function goes to the first process to ask (a pipe the two
    read), so each is compiled exactly once, here or in the worker (then loaded here from
    the cache it wrote, and reported); a CALL entry is compiled by its module's function."""
    plan, then = PLAN[:1], PLAN[1:] + [CALLED]
    first = run_plan(tmp_path, plan=plan, then=then)
    assert first["results"] == RESULTS
    assert sorted(first["missing"]) == sorted(e[1] for e in plan + then)
    assert first["stats"]["add"] == [0, 1]  # the plan's one entry: here
    queued = {e[1]: first["stats"][e[1]] for e in then}
    assert all(stats in ([0, 1], [1, 0]) for stats in queued.values()), queued
    by_worker = sorted(n for n, (hits, _) in queued.items() if hits)
    assert sorted(n for _, n, _ in first["reported"]) == by_worker
    assert all(took for *_, took in first["reported"])
    second = run_plan(tmp_path, plan=plan, then=then)  # warm: nothing compiled, no report
    assert second["missing"] == ["negate"]  # a CALL entry is never known to be cached ...
    assert second["reported"] == []
    assert all(stats == [1, 0] for stats in second["stats"].values())  # ... yet loads


def test_the_queue_hands_each_function_to_one_reader_once(monkeypatch):
    """The queue (a pipe both processes read a byte at a time from): a function's entries are
    one job, in the order given, and a job one reader took is not there for the other."""
    b1, b2 = ("m", "b", "()", 0.8, ""), ("m", "b", "(int64,)", 0.3, "")
    a, c = ("m", "a", "()", 1.0, ""), ("m", "c", "()", 0.5, "")
    queue = KP._queue([b1, a, b2, c])
    assert queue[1] == [[b1, b2], [a], [c]]
    assert os.read(queue[0], 1) == bytes([0])  # the other process takes b's two entries
    compiled = []
    monkeypatch.setattr(KP, "compile_entries", lambda entries, done=None: compiled.append(
        [e[1] for e in entries]))
    monkeypatch.setattr(KP, "load_cached", lambda dispatcher, signature: False)
    monkeypatch.setattr(KP, "kernel", lambda module, name: None)
    KP._compile_queued(queue)  # this one: the rest, one job at a time, until it is empty
    os.close(queue[0])
    assert compiled == [["a"], ["c"]]


def test_kernels_named_together_are_one_job_of_the_queue_in_their_order():
    """compile_plan's ``together`` (kernels that share costly callees): their entries are one
    group of the queue, at the place of the first, in the order given, so one process
    compiles them one after the other (the second finds the callees compiled)."""
    a, c = ("m", "a", "()", 1.0, ""), ("m", "c", "()", 0.5, "")
    e1, p1 = ("m", "ew", "()", 0.3, ""), ("n", "pool", "()", 0.3, "")
    queue = KP._queue([a, e1, c, p1], {("m", "ew"): "shared", ("n", "pool"): "shared"})
    try:
        assert queue[1] == [[a], [e1, p1], [c]]
    finally:
        os.close(queue[0])
    queue = KP._queue([a, e1, c, p1])  # without it: one job per function
    os.close(queue[0])
    assert queue[1] == [[a], [e1], [c], [p1]]


def test_without_load_the_queue_is_not_probed_before_the_worker_starts(monkeypatch):
    """compile_plan(load=False) (`accelstub compile`'s child) forks its worker before looking
    anything of ``then`` up in the cache (each process looks up the jobs it takes), and
    returns all of ``then``; with load, ``then`` is probed first, as before."""
    then = [("m", "a", "()", 1.0, ""), ("m", "b", "()", 0.5, "")]
    for load in (False, True):
        probed: list[str] = []
        at_fork: list[list[str]] = []
        monkeypatch.setattr(KP, "_loaded", lambda e: probed.append(e[1]) or False)
        monkeypatch.setattr(KP, "cores", lambda: 2)
        monkeypatch.setattr(KP, "can_fork", lambda: True)
        monkeypatch.setattr(KP, "_start_worker",
                            lambda there, queue, quiet: at_fork.append(list(probed)) or None)
        monkeypatch.setattr(KP, "_compile_queued", lambda queue, done=None: [])
        monkeypatch.setattr(KP, "compile_entries", lambda entries, done=None: None)
        assert KP.compile_plan([], then=then, load=load) == then
        assert at_fork == [[] if not load else ["a", "b"]]


def test_a_worker_that_fails_leaves_its_share_to_this_process(tmp_path):
    # the worker exits 3 at once, compiling nothing (its share, nor anything queued)
    got = run_plan(tmp_path, worker="failing", plan=PLAN[:3], then=PLAN[3:] + [CALLED])
    assert got["results"] == RESULTS
    assert got["reported"] == []
    assert all(misses == 1 and not hits for hits, misses in got["stats"].values())


def test_no_worker_is_forked_beside_other_threads():
    """A forked child has only the forking thread: a lock another thread holds (numba's
    compiler lock, while it compiles) would never be released in it."""
    import threading

    alone = subprocess.run([sys.executable, "-c", "from accelstub.emu import kernel_plan as KP;"
                            " print(KP.can_fork())"], capture_output=True, text=True, timeout=120)
    assert alone.stdout.split() == [str(hasattr(os, "fork") and sys.platform != "darwin")]
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not KP.can_fork()
    finally:
        stop.set()
        other.join()


def test_share_gives_the_longest_first_to_the_side_that_finishes_sooner():
    assert KP.WORKER_START_S == 0.1  # the figures below assume it
    b1, b2 = ("m", "b", "()", 0.8, ""), ("m", "b", "(int64,)", 0.3, "")
    a, c, d = ("m", "a", "()", 1.0, ""), ("m", "c", "()", 0.5, ""), ("m", "d", "()", 0.2, "")
    here, there = KP.share([a, b1, c, d, b2])
    # b's two signatures together (1.1: one function's entries stay on one side) here, at 0;
    # a (1.0) to the worker, which starts at 0.1 and is ahead (0.1 < 1.1): both at 1.1; c
    # here (a tie goes here): 1.6; d to the worker (1.1 < 1.6)
    assert here == [b1, b2, c]
    assert there == [a, d]


def test_entries_for_other_machines_are_left_out():
    plan = [("m", "v", "()", 1.0, "vnni"), ("m", "i", "()", 1.0, "int16"),
            ("m", "x", "()", 1.0, "")]
    names = [e[1] for e in KP.for_this_machine(plan)]
    assert names == (["v", "x"] if KP.NEEDS["vnni"]() else ["i", "x"])


def test_the_first_demo_run_compiles_the_device_plan_in_two_processes(tmp_path):
    """`accelstub run max78000` with nothing cached: the demo passes, and each kernel of the
    plan was compiled by this process or the worker (loaded from what it wrote), as share()
    divided them; a second run compiles nothing."""
    code = textwrap.dedent('''
        import contextlib, io, json
        from accelstub.devices import device_spec
        from accelstub.emu import kernel_plan as KP
        from accelstub.stub.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["run", "max78000"])
        stats = {e[1]: (sum(KP.kernel(e[0], e[1]).stats.cache_hits.values()),
                        sum(KP.kernel(e[0], e[1]).stats.cache_misses.values()))
                 for e in KP.for_this_machine(device_spec("max78000").kernel_plan)}
        print(json.dumps(dict(code=code, stats=stats)))
    ''')
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=600, env=env)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.splitlines()[-1]))
    from accelstub.devices import device_spec

    plan = KP.for_this_machine(device_spec("max78000").kernel_plan)
    here, there = KP.share(plan) if parallel() else (plan, [])  # one core or no fork: none
    first, second = runs
    assert first["code"] == 0 and second["code"] == 0
    assert first["stats"] == {**{e[1]: [0, 1] for e in here}, **{e[1]: [1, 0] for e in there}}
    assert second["stats"] == {e[1]: [1, 0] for e in here + there}


def test_accelstub_compile_names_every_kernel_of_the_plan(tmp_path):
    """`accelstub compile`'s child for max78000 in an empty cache prints a line for each kernel
    of the plan, those its worker process compiled too (KERNEL_MARK, stub/precompile.py), and
    of the parallel kernels it compiles after the demo."""
    from accelstub.devices import device_spec
    from accelstub.stub.precompile import KERNEL_MARK

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-m", "accelstub.stub.precompile", "max78000"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    ended = {tuple(line.split()[2:4]) for line in out.stderr.splitlines()
             if line.startswith(f"{KERNEL_MARK} end ")}
    plan = KP.for_this_machine(device_spec("max78000").kernel_plan)
    assert {(e[0], e[1]) for e in plan} <= ended
    # then the parallel kernels of the serial twins it ran (int_conv.parallel_twin_plan)
    import numba

    twins = {(e[0], e[1].removesuffix("_serial")) for e in plan if e[1].endswith("_serial")}
    assert twins and (twins <= ended) == (numba.config.NUMBA_NUM_THREADS > 1)


def test_a_numba_without_the_cache_hit_steps_loads_nothing_and_compiles_as_without_a_plan():
    """load_cached uses numba's private cache-hit steps; a dispatcher without them (another
    numba) is a miss, never an error, so the entry is compiled as it would be without a plan."""
    import types

    changed = types.SimpleNamespace(overloads={}, _cache=types.SimpleNamespace(),
                                    targetctx=None)
    assert KP.load_cached(changed, "(int64, int64)") is False
    changed._cache = types.SimpleNamespace(load_overload=lambda args, ctx: None)
    assert KP.load_cached(changed, "(int64, int64)") is False  # no _cache_hits either


def test_ahead_entries_are_compiled_by_the_queue_never_by_a_runs_plan(tmp_path):
    """An entry whose need is AHEAD (a kernel a run interprets while its work is small,
    KP.tiered) is left out of ``plan`` (what a run compiles), and compiled when
    it comes in ``then`` (`accelstub compile`'s queue)."""
    ahead = [e[:4] + (KP.AHEAD,) if e[1] == "largest" else e for e in PLAN]
    run = run_plan(tmp_path, plan=ahead)
    assert sorted(run["missing"]) == sorted(e[1] for e in PLAN if e[1] != "largest")
    assert run["results"] == RESULTS  # (largest compiled by its call)
    (tmp_path / "queued").mkdir()
    queued = run_plan(tmp_path / "queued", plan=[], then=[e for e in ahead if e[1] == "largest"])
    assert queued["missing"] == ["largest"]


def test_a_call_entry_passes_the_words_after_its_function_as_arguments(monkeypatch):
    """`call demo_when_ready ne16` (stub/precompile.py queue_for) calls the module's
    ``demo_when_ready("ne16")``; a call entry without words calls its function with none, as
    before. (The test's module names its function ``demo``.)"""
    import types

    calls = []
    module = types.ModuleType("accelstub_test_call_entry")
    module.demo = lambda *args: calls.append(args)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    KP.compile_entries([(module.__name__, "demo ne16", f"{KP.CALL}demo ne16", 1.0, ""),
                        (module.__name__, "demo", f"{KP.CALL}demo", 1.0, "")])
    assert calls == [("ne16",), ()]


#: the child: compile_plan of CALL jobs only (mark a..d, fails_in_worker), load given
LOAD_CHILD = textwrap.dedent('''
    import json, os, sys
    from accelstub.emu import kernel_plan as KP
    then = [("plan_kernels", f"mark {w}", f"{KP.CALL}mark {w}", 0.3, "") for w in "abcd"]
    then.append(("plan_kernels", "fails_in_worker", KP.CALL + "fails_in_worker", 0.3, ""))
    reported = []
    KP.compile_plan([], then=then, load=sys.argv[1] == "load",
                    on_worker=lambda m, n, s: reported.append(n))
    print(json.dumps(dict(reported=reported, pid=os.getpid())))
''')


def test_without_load_what_the_worker_did_is_not_done_again_here(tmp_path):
    """compile_plan(load=False) (`accelstub compile`'s child): a queued job is called once, in
    one process (load=True calls every one here again, to load what it compiled); a job that
    failed in the worker (not reported) is run here."""
    (tmp_path / "plan_kernels.py").write_text(KERNELS_SOURCE)
    for load in ("load", "noload"):
        calls = tmp_path / "calls.txt"
        calls.unlink(missing_ok=True)
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
                   PYTHONPATH=os.pathsep.join([str(tmp_path)] + [
                       p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        out = subprocess.run([sys.executable, "-c", LOAD_CHILD, load], capture_output=True,
                             text=True, timeout=300, env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout.splitlines()[-1])
        runs = [line.split() for line in calls.read_text().splitlines()]
        here = str(got["pid"])
        by_worker = sorted(w for w, pid in runs if pid != here)
        assert sorted("mark " + w for w in by_worker if w != "fails") == sorted(got["reported"])
        if parallel():
            assert by_worker  # (the worker took jobs)
        # load: every queued job is called here again after the queue (to load its kernels);
        # "fails" is called here once more than that where this process took it from the
        # queue, and once where the worker took it (it failed there: done here instead)
        again = load == "load" and parallel()
        assert [w for w, pid in runs if pid == here].count("fails") == (
            1 + (again and "fails" not in by_worker)), (load, runs)
        for w in "abcd":
            assert [r[0] for r in runs].count(w) == (2 if again else 1), (load, runs)


def test_the_opt_level_is_set_for_a_listed_entry_only_and_restored_even_on_an_error(monkeypatch):
    """compile_entries compiles an entry of OPT_LEVELS with numba's ``config.OPT`` at its level
    and any other entry at numba's own; numba's level object is back afterwards, also when the
    entry's compile raises."""
    import types

    from numba.core import config

    seen = {}
    module = types.ModuleType("accelstub_test_opt_level")
    module.low = lambda: seen.setdefault("low", config.OPT)
    module.other = lambda: seen.setdefault("other", config.OPT)

    def fails():
        seen["fails"] = config.OPT
        raise RuntimeError("compile failed")

    module.fails = fails
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(KP, "OPT_LEVELS", {(module.__name__, "low"): 1,
                                           (module.__name__, "fails"): 2})
    numbas = config.OPT
    KP.compile_entries([(module.__name__, n, f"{KP.CALL}{n}", 0.1, "") for n in ("low", "other")])
    assert (seen["low"], seen["other"]) == (1, numbas)
    assert config.OPT is numbas
    try:
        KP.compile_entries([(module.__name__, "fails", f"{KP.CALL}fails", 0.1, "")])
    except RuntimeError:
        pass
    assert seen["fails"] == 2 and config.OPT is numbas


def test_the_opt_levels_name_only_ethos_u85_kernels_compiled_ahead():
    """OPT_LEVELS lists exactly the Ethos-U85 weight walk, weight decoder and AXI burst counter
    (kernels of the device's plan compiled ahead only: NEEDS "ahead", kernel_plan.tiered) and
    the executor's row loop (`accelstub compile`'s AHEAD call): measured as fast at level 1 as
    at 3, or run once per layer (design notes, "Cheaper optimisation for kernels that run
    once"), each a kernel of its module."""
    from accelstub.devices.ethos_u85 import KERNEL_PLAN
    from accelstub.stub.precompile import AHEAD

    planned = {("accelstub.emu.weights.ethosu85", "_walk"),
               ("accelstub.emu.weights.ethosu85", "_swd_decode"),
               ("accelstub.emu.memory.ethosu85_axi", "_burst_counts")}
    executor = ("accelstub.emu.executor.ethosu85", "run_rows")
    assert set(KP.OPT_LEVELS) == planned | {executor} and set(KP.OPT_LEVELS.values()) == {1}
    assert planned <= {(e[0], e[1]) for e in KERNEL_PLAN if e[4] == KP.AHEAD}
    assert executor in {(e[0], e[1]) for e in AHEAD["ethos-u85"]}
    for module, name in planned | {executor}:
        assert KP.kernel(module, name) is not None


#: the child: compile_entries of the Ethos-U85 plan's OPT_LEVELS entries and _addsub_fast (not
#: listed) in an empty cache, with the highest level numba's pass builders were asked for while
#: each compiled (its "cheap" pre-pass is level 0 for all)
LEVELS_CHILD = textwrap.dedent('''
    import json
    from numba.core import codegen
    from accelstub.devices.ethos_u85 import KERNEL_PLAN
    from accelstub.emu import kernel_plan as KP
    levels, build = [], codegen.CPUCodegen._pass_builder
    def recording(self, **kwargs):
        levels.append(int(kwargs.get("opt", codegen.config.OPT)))
        return build(self, **kwargs)
    codegen.CPUCodegen._pass_builder = recording
    seen = {}
    def done(module, name, seconds):
        seen[name] = max(levels)
        levels.clear()
    KP.compile_entries([e for e in KERNEL_PLAN if (e[0], e[1]) in KP.OPT_LEVELS
                        or e[1] == "_addsub_fast"], done)
    print(json.dumps(seen))
''')

#: a later child on that cache: each listed kernel loads from it (a hit, no compile) and gives
#: what its interpreted form (the same code, emu/jit.py interpreted) gives
LOADS_CHILD = textwrap.dedent('''
    import json
    import numpy as np
    from accelstub.devices.ethos_u85 import KERNEL_PLAN
    from accelstub.emu import kernel_plan as KP
    from accelstub.emu.jit import interpreted
    import accelstub.emu.weights.ethosu85 as Wt
    import accelstub.emu.memory.ethosu85_axi as AX
    loaded = {e[1]: KP.load_cached(KP.kernel(e[0], e[1]), e[2]) for e in KERNEL_PLAN
              if (e[0], e[1]) in KP.OPT_LEVELS}
    rng = np.random.default_rng(5)
    vals = rng.integers(-30, 30, 3000) * (rng.random(3000) < 0.6)
    buf = np.frombuffer(Wt.encode_swd(vals, zdiv=0, wdiv=5), np.uint8)
    p = Wt.ordering_params(ofm_depth=24, ifm_depth=40, kernel_hw=(3, 3), ofm_block_depth=16)
    ranges = np.sort(rng.integers(0, 5000, (40, 2)), axis=1).astype(np.int64)
    hashes = np.array([0x5a40, 0xa580], np.int64)
    def calls(f):
        out = np.zeros(4000, np.int64)
        decoded = f["_swd_decode"](buf, out)
        n = f["_walk"](p, False, np.zeros(0, np.int64), np.zeros(0, np.int64))
        ws, idx = np.zeros(n, np.int64), np.zeros(n, np.int64)
        f["_walk"](p, True, ws, idx)
        counts = np.zeros((3, 4), np.int64)
        bursts = f["_burst_counts"](ranges, 64, hashes, counts)
        return [[int(v) for v in decoded], out.tolist(), n, ws.tolist(), idx.tolist(),
                int(bursts), counts.tolist()]
    kernels = {n: getattr(Wt, n, None) or getattr(AX, n) for n in loaded}
    compiled = calls(kernels)
    same = compiled == calls({n: interpreted(k) for n, k in kernels.items()})
    misses = {n: sum(k.stats.cache_misses.values()) for n, k in kernels.items()}
    print(json.dumps(dict(loaded=loaded, same=same, misses=misses,
                          decoded=compiled[0][0] == vals.size)))
''')


def test_a_kernel_compiled_at_its_lower_level_is_cached_and_computes_as_interpreted(tmp_path):
    """In an empty cache, the listed kernels compile at their OPT_LEVELS level (numba's pass
    builders asked for nothing above it) and one not listed at numba's 3; a later process loads
    each listed kernel from that cache, compiling nothing, and its results equal its
    interpreted form's on a weight stream, a walk and a burst count."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    run = [subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
           for child in (LEVELS_CHILD, LOADS_CHILD)]
    for out in run:
        assert out.returncode == 0, out.stderr
    levels, later = (json.loads(out.stdout.splitlines()[-1]) for out in run)
    assert levels == {"_walk": 1, "_swd_decode": 1, "_burst_counts": 1, "_addsub_fast": 3}
    assert later == dict(loaded={n: True for n in ("_walk", "_swd_decode", "_burst_counts")},
                         same=True, misses={"_walk": 0, "_swd_decode": 0, "_burst_counts": 0},
                         decoded=True)

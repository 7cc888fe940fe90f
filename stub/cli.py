"""The ``accelstub`` command: serve, run, eval, diff, compile, describe, svd, tui, --version, and
the commands device packages add (DeviceSpec.tools: Ethos-U85's disasm)."""
from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import threading
from importlib import metadata, resources
from pathlib import Path

from accelstub.devices import DEFAULT_BUDGET_MIB, DEVICES, device_spec, open_device
from accelstub.devices.description import Description
from accelstub.devices.device import HISTORY_PLAN, ProgramOptions

#: every construction option some device declares (DeviceSpec.options), by name
_ALL_OPTIONS = {o.name: o for d in DEVICES for o in device_spec(d).options}
#: commands the device packages add (DeviceSpec.tools), by name
TOOLS = {t.name: t for d in DEVICES for t in device_spec(d).tools}


def version() -> str:
    try:
        return metadata.version("accelstub")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class _VersionAction(argparse.Action):
    """``--version``, the version looked up only when asked: finding the installed package's
    metadata searched every folder of sys.path, a few ms of each command's start (issue 31
    #5: the warm `run`)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 help: str = "show the version and exit") -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"accelstub {version()}")
        parser.exit()


def demo_program(device: str) -> Path | None:
    """The bundled demo program of ``device``: configs/demo/<device>_demo (a directory in the
    format the vendor tools generate) or configs/demo/<device>_demo.cfg (a command script)."""
    demo = resources.files("accelstub.configs").joinpath("demo")
    for name in (f"{device}_demo", f"{device}_demo.cfg"):
        res = demo.joinpath(name)
        if res.is_dir() or res.is_file():
            return Path(str(res))
    return None


def _demo_for(args: argparse.Namespace) -> Path | None:
    """The bundled demo, unless the device options given contradict the ones it was built for
    (`serve ethos-u85 --macs 1024`: the demo is compiled for 256 MACs): then the device is
    served without a program, as asked, and a note says why."""
    demo = demo_program(args.device)
    if demo is None:
        return None
    try:
        named = device_spec(args.device).program_device_options(demo)
    except ValueError:
        named = {}
    clash = [f"--{k} {v}" for k, v in named.items() if getattr(args, k, None) not in (None, v)]
    if clash:
        print(f"accelstub: the bundled demo is built for {', '.join(clash)}; serving with no "
              "program (give one with --program)", file=sys.stderr)
        return None
    return demo


def describe(desc: Description) -> str:
    """The register map as a readable table, one block after the other."""
    out = [f"{desc.title} ({desc.name}) — {len(desc.registers)} registers", ""]
    out.append("Regions:")
    for r in desc.regions:
        pop = sum(e - s for s, e in r.populated)
        out.append(f"  {r.base:#010x}-{r.end - 1:#010x}  {r.name:<20} {r.kind:<9} "
                   f"{pop:>7} of {r.size} bytes populated")
    for b in desc.blocks:
        out += ["", f"Block {b.name} @ {b.base:#010x} (group {b.group}) {b.doc}".rstrip()]
        out.append(f"  {'address':<10}  {'register':<28} {'reset':<10}  fields")
        for r in b.registers:
            fields = ", ".join(f"{f.name}[{f.msb}:{f.lsb}]"
                               f"{'' if f.access == 'rw' else ' ' + f.access}"
                               + (f" {f.text_of(r.reset)}" if f.text else "")  # "1", not 49
                               if f.width > 1 else
                               f"{f.name}[{f.lsb}]{'' if f.access == 'rw' else ' ' + f.access}"
                               for f in sorted(r.fields, key=lambda f: -f.lsb))
            out.append(f"  {r.address:#010x}  {r.name:<28} {r.reset:#010x}  {fields}")
    return "\n".join(out) + "\n"


def _device_options(args: argparse.Namespace, program: str | Path | None = None) -> dict:
    """The construction options given on the command line that apply to ``args.device``
    (DeviceSpec.options); one that does not apply is an error naming the devices it is for.
    Options not given are taken from ``program`` where it names them (the MACs an Ethos-U85
    stream was compiled for); a value there the device cannot take is an error."""
    spec = device_spec(args.device)
    mine = {o.name for o in spec.options}
    out = {}
    if program is not None:
        try:
            named = spec.program_device_options(program)
        except ValueError as e:
            raise CliError(str(e)) from None
        out.update((k, v) for k, v in named.items() if getattr(args, k, None) is None)
        if out and getattr(args, "verbose", False):
            print("accelstub: " + ", ".join(f"--{k} {v}" for k, v in out.items())
                  + f" (from {program})", file=sys.stderr)
    for name in sorted(_ALL_OPTIONS):
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in mine:
            owners = [d for d in DEVICES if name in {o.name for o in device_spec(d).options}]
            raise CliError(f"--{name} applies to {', '.join(owners)} only, not {args.device}")
        out[name] = value
    return out


def _program_options(args: argparse.Namespace) -> ProgramOptions:
    """--input/--output/--expect, refused for a device whose importer takes none of them."""
    spec = device_spec(args.device)
    given = {k: getattr(args, k, None) for k in ("input", "output", "expect", "output_ops")}
    for k, v in given.items():
        if v is not None and k not in spec.program_options:
            raise CliError(f"--{k.replace('_', '-')} does not apply to {args.device} (its "
                           "programs carry their own data)")
    return ProgramOptions(**given, verbose=bool(getattr(args, "verbose", False)))


def mib_count(text: str) -> int:
    """argparse type of --history-mib: a whole number of MiB, 0 or more."""
    try:
        mib = int(text, 10)
    except ValueError:
        mib = -1
    if mib < 0:
        raise argparse.ArgumentTypeError(f"invalid size '{text}' (MiB: a whole number, 0 or "
                                         "more; 0 turns reverse-execution history off)")
    return mib


def port_number(text: str) -> int:
    """argparse type of --port/--telnet-port/--tcl-port: 0-65535, so a bad port is a usage
    error and not an OverflowError from bind()."""
    try:
        port = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port '{text}' (a number 0-65535)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range (0-65535; 0 picks a free "
                                         "port)")
    return port


class CliError(Exception):
    """A command-line mistake: printed as "accelstub: error: ...", exit status 2."""


def _serve(args: argparse.Namespace) -> int:
    from .compile_notice import CompileNotice

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        stream=sys.stderr, format="accelstub: %(message)s")
    from .numba_start import collector_for_compiling

    with CompileNotice():  # the first step compiles kernels: the server's terminal says so
        with collector_for_compiling():
            # before the server's threads (its worker is forked); the history's kernels too
            # where the server records one (a first continue would compile them)
            _compile_plan(args.device, history=args.history_mib > 0)
        return _serve_until_stopped(args)


def _compile_plan(device: str, history: bool = False) -> None:
    """Have the kernels ``device``'s runs call (its DeviceSpec.kernel_plan; with ``history``,
    those of recording it too: device.HISTORY_PLAN) compiled, two at a time, or loaded if
    cached (emu/kernel_plan.py): a first `run`, or a first step of `serve`, then compiles none
    of them one after the other. Where it compiled, numba's cyclic
    garbage is collected at once: the start-up that follows is frozen with all that is
    alive (numba_start.collector_paused), and a first MAX78000 run had ~26 000 such objects
    left, never freed after the freeze (~12 ms to collect, on a run that compiled)."""
    plan = device_spec(device).kernel_plan + (HISTORY_PLAN if history else ())
    if plan:
        from accelstub.emu.kernel_plan import compile_plan

        if compile_plan(plan):
            gc.collect()


def _serve_until_stopped(args: argparse.Namespace) -> int:
    from .numba_start import collector_paused
    from .program import ProgramError
    from .server import StubServer
    from .transports import PipeConnection, SerialConnection

    out = sys.stderr if args.stdio else sys.stdout
    program = args.program or (None if args.no_demo else _demo_for(args))
    with collector_paused():  # the device, the server's tables and the program live as long
        device = open_device(args.device, **_device_options(args, program))  # as it serves
        options = _program_options(args)
        tcp = not args.stdio
        server = StubServer([device], host=args.bind, gdb_port=args.port if tcp else None,
                            telnet_port=args.telnet_port if tcp else None,
                            tcl_port=args.tcl_port if tcp else None,
                            history_mib=args.history_mib)
        if program is not None:
            try:
                summary = server.load_program(program, log=lambda s: print(s, file=sys.stderr),
                                              options=options)
            except ProgramError as e:
                print(f"accelstub: error: {e}", file=sys.stderr)
                return 2
            print(f"accelstub: loaded {summary}; halted before the first "
                  f"{device.unit_name} at pc {device.pc:#010x}", file=out)
    try:
        server.start()
    except OSError as e:
        print(f"accelstub: error: cannot listen on {args.bind}: {e} (use --port 0 to pick free "
              f"ports)", file=sys.stderr)
        return 2
    print(server.ready_line(), file=out, flush=True)
    if args.serial:
        try:
            conn = SerialConnection(args.serial, args.baud)
        except Exception as e:
            print(f"accelstub: error: cannot open serial port {args.serial}: {e}",
                  file=sys.stderr)
            server.stop()
            return 2
        threading.Thread(target=server.gdb[0].serve_connection, args=(conn,),
                         daemon=True).start()
    try:
        if args.stdio:
            server.gdb[0].serve_connection(PipeConnection(0, 1))
        else:
            signal.signal(signal.SIGTERM, lambda *a: server.shutdown_requested.set())
            while not server.shutdown_requested.wait(0.5):
                pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _run(args: argparse.Namespace) -> int:
    """``accelstub run DEVICE --program P``: load (the device's importer or a command script),
    run to the end with the program's driver, print each check. Exit 0 = every check passed,
    1 = a check failed, 2 = bad input, a model fault or a stuck program."""
    from .compile_notice import CompileNotice
    from .numba_start import collector_for_compiling

    with CompileNotice(), collector_for_compiling():  # a first run compiles kernels: say so
        _compile_plan(args.device)
        return _run_program(args)


def _run_program(args: argparse.Namespace) -> int:
    import time

    from accelstub.devices.runcontrol import RunControl

    from .commands.table import CommandContext  # not the whole table (stub/commands/__init__)
    from .numba_start import collector_paused
    from .program import ProgramError, load_program, run_to_end

    with collector_paused():  # the device and its program live as long as the run
        rc = RunControl(open_device(args.device, **_device_options(args, args.program)))
        options = _program_options(args)
        try:
            summary = load_program(CommandContext(targets=[rc]), args.program, options)
        except ProgramError as e:
            print(f"accelstub: error: {e}", file=sys.stderr)
            return 2
    if args.verbose:
        print(f"accelstub: loaded {summary}", file=sys.stderr)
    t0 = time.perf_counter()
    tty = sys.stderr.isatty()
    total = (rc.host.total_units if rc.host else None) or len(rc.device.units()) or None
    word = rc.device.unit_name

    def progress(done: int) -> None:
        # progress on stderr for long runs: always on a terminal, after 2 s otherwise
        of = f"/{total}" if total else ""
        if tty:
            print(f"\r{word} {done}{of}", end="", file=sys.stderr, flush=True)
        elif time.perf_counter() - t0 > 2.0:
            print(f"accelstub: {word} {done}{of}", file=sys.stderr, flush=True)

    outcome = run_to_end(rc, progress, args.verbose)
    if tty:
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    for line in outcome.lines:
        if outcome.code == 2:
            print(f"accelstub: {line}", file=sys.stderr)
        else:
            print(line)
    return outcome.code


def _eval(args: argparse.Namespace) -> int:
    """``accelstub eval``: a thin layer over accelstub.evaluation (api/ is above stub/, so it is
    imported here, when the command runs)."""
    from accelstub.devices.errors import AccelstubError
    from accelstub.evaluation import Progress, evaluate

    if args.resume and args.out is None:
        raise CliError("--resume continues the stopped run of --out RESULTS.npz: give --out")
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers {args.workers}: give 1 or more")
    try:
        res = evaluate(args.device, args.inputs, args.program, labels=args.labels,
                       reference=args.reference, out=args.out, workers=args.workers,
                       resume=args.resume, progress=Progress(), ray=args.ray,
                       **_device_options(args, args.program))
    except (AccelstubError, ValueError, OSError) as e:
        print(f"accelstub: error: {e}", file=sys.stderr)
        return 2
    print(res.summary())
    if not res.complete:
        print(f"stopped after {res.count} of {len(res.done)} samples"
              + (f"; 'accelstub eval ... --out {args.out} --resume' continues" if args.out
                 else ""), file=sys.stderr)
        return 130
    return 1 if len(res.differing) else 0


def _diff(args: argparse.Namespace) -> int:
    """``accelstub diff DEVICE --program P --reference R``: run the program and compare every
    referenced unit's tensor with the reference (devices/layer_diff.py); exit 0 = no
    divergence, 1 = a divergence, 2 = bad input, a fault or a stuck program."""
    import json

    from accelstub.devices.errors import AccelstubError
    from accelstub.devices.layer_diff import start_diff
    from accelstub.devices.runcontrol import RunControl

    from .commands import CommandContext
    from .compile_notice import CompileNotice
    from .files import FileRefused, write_regular
    from .program import load_program

    rc = RunControl(open_device(args.device, **_device_options(args, args.program)))
    try:
        load_program(CommandContext(targets=[rc]), args.program, _program_options(args))
        differ = start_diff(rc, Path(args.reference), stop=not args.all)
    except (AccelstubError, ValueError, OSError) as e:
        print(f"accelstub: error: {e}", file=sys.stderr)
        return 2
    with CompileNotice():
        stop = rc.run_here()
    differ.detach()
    print(differ.table())
    if args.json:
        try:
            write_regular(Path(args.json), (json.dumps(differ.as_json(), indent=1) + "\n")
                          .encode())
        except (FileRefused, OSError) as e:
            print(f"accelstub: error: cannot write {args.json}: {e}", file=sys.stderr)
            return 2
    if stop.reason not in ("done", "breakpoint"):
        print(f"accelstub: error: {stop.message or stop.reason}", file=sys.stderr)
        return 2
    missing = sorted(set(differ.by_unit) - {d.index for d in differ.results})
    if stop.reason == "done" and missing:
        print(f"accelstub: warning: the reference has {rc.device.unit_name}s the run never "
              f"reached: {', '.join(map(str, missing[:8]))}", file=sys.stderr)
    return 1 if differ.first_divergence is not None else 0


def main(argv: list[str] | None = None) -> int:
    from .install_check import install_problem

    problem = install_problem()
    if problem:
        print(f"accelstub: error: {problem}", file=sys.stderr)
        return 2
    ap = argparse.ArgumentParser(prog="accelstub", description="GDB stub for AI accelerator "
                                 "emulators, compatible with OpenOCD's ports and commands")
    ap.add_argument("--version", action=_VersionAction)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve a device to gdb, telnet and Tcl RPC clients")
    s.add_argument("device", choices=DEVICES)
    s.add_argument("--program", help="program to load (default: the bundled demo)")
    s.add_argument("--no-demo", action="store_true", help="start with no program loaded")
    s.add_argument("--port", type=port_number, default=3333,
                   help="gdb port (0 = pick a free one)")
    s.add_argument("--telnet-port", type=port_number, default=4444)
    s.add_argument("--tcl-port", type=port_number, default=6666)
    s.add_argument("--bind", default="127.0.0.1", help="address to listen on (IPv4 or IPv6, "
                   "e.g. ::1)")
    s.add_argument("--serial", metavar="PORT_OR_URL", help="also serve gdb on a serial port or "
                   "pyserial URL")
    s.add_argument("--baud", type=int, default=115200)
    s.add_argument("--history-mib", type=mib_count, default=DEFAULT_BUDGET_MIB, metavar="MIB",
                   help="memory for reverse execution (reverse-stepi, reverse-continue): the "
                   "oldest history is dropped beyond it; 0 turns recording off (default "
                   f"{DEFAULT_BUDGET_MIB})")
    s.add_argument("--stdio", action="store_true",
                   help="speak RSP on stdin/stdout (target remote | accelstub serve ... --stdio)")
    _program_arguments(s, run=False)
    s.add_argument("-v", "--verbose", action="store_true")
    r = sub.add_parser("run", help="load a program, run it to completion and check its known "
                       "answer (exit 0 PASS, 1 FAIL, 2 bad input)")
    r.add_argument("device", choices=DEVICES)
    r.add_argument("--program", metavar="DIR|FILE", help="default: the bundled demo; " + "; ".join(
        f"{d}: {device_spec(d).program_help}" for d in DEVICES))
    _program_arguments(r, run=True)
    r.add_argument("-v", "--verbose", action="store_true")
    c = sub.add_parser("compile", help="compile the emulators' kernels once for this machine "
                       "(numba, cached on disk) by running the bundled demos, so that the first "
                       "run or step after install does not wait for it")
    c.add_argument("device", nargs="*", metavar="DEVICE",
                   help=f"devices (default: all of {', '.join(DEVICES)})")
    d = sub.add_parser("describe", help="print the register map")
    d.add_argument("device", choices=DEVICES)
    v = sub.add_parser("svd", help="write CMSIS-SVD to stdout")
    v.add_argument("device", choices=DEVICES)
    for tool in TOOLS.values():  # what device packages add (DeviceSpec.tools)
        sub.add_parser(tool.name, help=tool.help).add_argument(tool.argument,
                                                               help=tool.argument_help)
    e = sub.add_parser("eval", help="run every sample of a dataset through a program: top-1 "
                       "accuracy, bit-exact agreement with a reference (exit 0 done, 1 samples "
                       "differ from the reference, 2 bad input, 130 stopped)")
    e.add_argument("device", choices=DEVICES)
    e.add_argument("--program", metavar="DIR|FILE", help="default: the bundled demo")
    e.add_argument("--inputs", required=True, metavar="DATA", help="an .npy/.npz whose first "
                   "axis counts the samples (each the program's input, with or without its "
                   "batch axis of 1, in the toolchain's layout), or a directory of .npy files")
    e.add_argument("--labels", metavar="L.npy", help="class index per sample (top-1 accuracy)")
    e.add_argument("--reference", metavar="R.npz|MODEL.tflite", help="the framework's "
                   "outputs (array 'outputs', N x the output's shape), or for ethos-u85 the "
                   "pre-Vela .tflite run per sample by LiteRT's reference kernels (needs "
                   "ai-edge-litert): bit-exact and top-1 agreement")
    e.add_argument("--out", metavar="RESULTS.npz", help="outputs and per-sample results; "
                   "streamed to RESULTS.npz.partial/ while running")
    e.add_argument("--workers", type=int, default=None, help="processes (default: every core)")
    e.add_argument("--resume", action="store_true", help="continue a stopped run of --out")
    e.add_argument("--ray", nargs="?", const="", metavar="ADDRESS", help="run on a Ray "
                   "cluster (pip install 'accelstub[cluster]'): 'auto', ray://HOST:10001, or "
                   "none for RAY_ADDRESS / a local cluster; --workers then counts actors")
    f = sub.add_parser("diff", help="run a program and compare every layer's output with the "
                       "framework's own tensors: one line per layer, stopping at the first "
                       "divergence (exit 0 none, 1 divergence, 2 bad input)")
    f.add_argument("device", choices=DEVICES)
    f.add_argument("--program", metavar="DIR|FILE", help="default: the bundled demo")
    f.add_argument("--reference", required=True, metavar="R", help="per-layer reference: an "
                   ".npz of arrays keyed by unit index or label (an entry 'layout', e.g. "
                   "NCHW, states their layout; default each unit tensor's own); max78000: "
                   "ai8xize's log.txt (--verbose --log); ethos-u85: the model before Vela "
                   "(.tflite, run by LiteRT); ne16: the pulp-nnx test application (golden output); "
                   "nvdla: the trace .cfg (per-layer check_crc)")
    f.add_argument("--all", action="store_true", help="compare every layer, do not stop at "
                   "the first divergence")
    f.add_argument("--json", metavar="FILE", help="write the table as JSON (for CI)")
    f.add_argument("--input", help="input tensor(s) for --program (devices whose programs "
                   "take one)")
    t = sub.add_parser("tui", help="terminal UI: attach to a stub, or start one and attach")
    t.add_argument("device", nargs="?", choices=DEVICES)
    t.add_argument("--connect", metavar="HOST:PORT", help="attach to a running stub")
    t.add_argument("--program", help="program to load (default: the bundled demo)")
    args = ap.parse_args(argv)
    try:
        return _dispatch(ap, args)
    except CliError as e:
        print(f"accelstub: error: {e}", file=sys.stderr)
        return 2


def _program_arguments(p: argparse.ArgumentParser, run: bool) -> None:
    """--input (and for run --output/--expect) and every device's construction options, with
    the devices each applies to in the help."""
    def owners(key: str) -> str:
        return ", ".join(d for d in DEVICES if key in device_spec(d).program_options)

    p.add_argument("--input", help=f"{owners('input')}: input tensor(s) for --program: a .npy "
                   "for a model with one input; an .npz with one array per model input, named "
                   "as the model's inputs or else taken in file order (np.savez(f, x0, x1))")
    if run:
        p.add_argument("--output", help=f"{owners('output')}: write the output tensor(s) here "
                       "(.npy, or .npz for several)")
        p.add_argument("--expect", help=f"{owners('expect')}: expected output(s) to compare "
                       "with: a .npy, or an .npz with one array per model output; or a "
                       "per-operation reference, an .npz of arrays op0, op1, ... holding the "
                       "bytes each operation writes (as --output-ops writes them): the first "
                       "operation that differs is named")
        p.add_argument("--output-ops", metavar="FILE.npz", help=f"{owners('output_ops')}: write "
                       "the bytes each operation writes (arrays op0, op1, ...; run -v prints "
                       "their CRC-32), a per-operation reference for --expect")
    for name, o in _ALL_OPTIONS.items():
        devs = ", ".join(d for d in DEVICES if o in device_spec(d).options)
        p.add_argument(f"--{name}", type=o.type, choices=o.choices or None,
                       help=f"{devs}: {o.help}")


def _dispatch(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.cmd in ("run", "serve", "eval", "diff"):  # commands that run kernels
        from .numba_start import start_numba_lean

        start_numba_lean()  # numba without SciPy, cffi, PyYAML: ~a third of its start, unused
    if args.cmd == "tui":
        if (args.device is None) == (args.connect is None):
            ap.error("tui: give either DEVICE or --connect HOST:PORT")
        from accelstub.tui.app import run_tui  # the one upward import: the CLI is the top

        return run_tui(connect=args.connect, device=args.device, program=args.program)
    if args.cmd in ("run", "diff"):
        if args.program is None:
            args.program = demo_program(args.device)
            if args.program is None:
                raise CliError(f"{args.device} has no bundled demo: give --program")
        return _run(args) if args.cmd == "run" else _diff(args)
    if args.cmd == "eval":
        return _eval(args)
    if args.cmd == "compile":
        unknown = [d for d in args.device if d not in DEVICES]
        if unknown:
            ap.error(f"compile: unknown device {unknown[0]!r} (choose from {', '.join(DEVICES)})")
        from .precompile import compile_devices

        return compile_devices(args.device or list(DEVICES))
    if args.cmd in TOOLS:
        tool = TOOLS[args.cmd]
        return tool(getattr(args, tool.argument))
    if args.cmd == "serve":
        if args.port == 0 and args.telnet_port == 4444:
            args.telnet_port = 0
        if args.port == 0 and args.tcl_port == 6666:
            args.tcl_port = 0
        return _serve(args)
    from accelstub.devices.description import load_description

    desc = load_description(args.device)
    try:
        if args.cmd == "describe":
            sys.stdout.write(describe(desc))
        elif args.cmd == "svd":
            from .svd import description_to_svd

            sys.stdout.write(description_to_svd(desc))
    except BrokenPipeError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fuzz the gdb, telnet and Tcl RPC ports of `accelstub serve`: the command line of
accelstub.testkit.port_fuzz (its docstring says what is sent and what is reported).

    python benchmarks/fuzz_ports.py --packets 1000000            # the full run, every device
    python benchmarks/fuzz_ports.py --packets 20000 --devices max78000 --[AI8X]
"""
import sys

from accelstub.testkit.port_fuzz import main
from machine import bench_main

if __name__ == "__main__":
    sys.exit(bench_main(main, kernels_here=False))

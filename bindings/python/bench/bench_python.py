"""What the Python package costs over C, on the native device, in one run.

1. buf.write / buf.read of 64 bytes, per call, against the C call the method
   makes (ferry_write / ferry_read of the same bytes, timed in C in the same
   process: ferry._ferry._time_c): the difference is the binding's overhead.
2. 256 MiB buf.write / buf.read against the same C calls: throughput ratio.
3. buf.write(a, queue=q) of 64 bytes, per submission, against C's
   ferry_write_async of the same bytes on a queue of its own (the queues are
   synchronised after every batch of BATCH submissions, untimed).
4. DLPack from Python: numpy.from_dlpack(buf) and ferry.from_dlpack(array) +
   free, per call, at 64 bytes and 256 MiB (the C export + import is timed by
   bench/bench_dlpack.c).

Every figure is the median of repeated timed loops; Python's and C's repeats
alternate. usage: python3 bench_python.py [--quick] [--json FILE]
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

import ferry
from ferry import _ferry


def python_loop(method, arg):
    def run(loops):
        t0 = time.perf_counter()
        for _ in range(loops):
            method(arg)
        return time.perf_counter() - t0

    return run


def call_loop(fn):
    def run(loops):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        return time.perf_counter() - t0

    return run


def c_loop(op, buf, array):
    return lambda loops: _ferry._time_c(op, buf, array, loops)


def alternate(timers, loops, repeats):
    """The median time per call of each timer, their repeats interleaved."""
    samples = [[] for _ in timers]
    for _ in range(repeats):
        for i, timer in enumerate(timers):
            samples[i].append(timer(loops) / loops)
    return [statistics.median(s) for s in samples]


def small_transfers(native, loops, repeats, results):
    buf = native.alloc(64, np.uint8)
    src = np.full(64, 7, np.uint8)
    dst = np.empty(64, np.uint8)
    timers = [
        python_loop(buf.write, src),
        c_loop("write", buf, src),
        python_loop(buf.read, dst),
        c_loop("read", buf, dst),
    ]
    py_w, c_w, py_r, c_r = alternate(timers, loops, repeats)
    buf.free()
    for name, p, c in (("write", py_w, c_w), ("read", py_r, c_r)):
        results[f"{name}_64B_python_ns"] = p * 1e9
        results[f"{name}_64B_c_ns"] = c * 1e9
        results[f"{name}_64B_overhead_ns"] = (p - c) * 1e9
        print(
            f"64 B {name:5}: buf.{name} {p * 1e9:7.1f} ns, ferry_{name} {c * 1e9:6.1f} ns:"
            f" +{(p - c) * 1e9:.1f} ns"
        )


BATCH = 1000


def async_submissions(native, loops, repeats, results):
    buf = native.alloc(64, np.uint8)
    src = np.full(64, 7, np.uint8)
    q_py, q_c = ferry.Queue(native), ferry.Queue(native)

    def python(n):
        spent = 0.0
        for done in range(0, n, BATCH):
            t0 = time.perf_counter()
            for _ in range(min(BATCH, n - done)):
                buf.write(src, queue=q_py)
            spent += time.perf_counter() - t0
            q_py.synchronize()
        return spent

    def c(n):
        spent = 0.0
        for done in range(0, n, BATCH):
            spent += _ferry._time_c("write_async", buf, src, min(BATCH, n - done), q_c)
            q_c.synchronize()
        return spent

    p, c_t = alternate([python, c], loops, repeats)
    q_py.destroy()
    q_c.destroy()
    buf.free()
    results["write_async_64B_python_ns"] = p * 1e9
    results["write_async_64B_c_ns"] = c_t * 1e9
    results["write_async_64B_overhead_ns"] = (p - c_t) * 1e9
    print(
        f"64 B write, queue=: buf.write {p * 1e9:7.1f} ns, ferry_write_async {c_t * 1e9:6.1f} ns:"
        f" +{(p - c_t) * 1e9:.1f} ns per submission"
    )


def large_transfers(native, repeats, results):
    n = 256 << 20
    buf = native.alloc(n, np.uint8)
    src = np.ones(n, np.uint8)
    dst = np.zeros(n, np.uint8)
    buf.write(src)  # every page touched before timing
    buf.read(dst)
    timers = [
        python_loop(buf.write, src),
        c_loop("write", buf, src),
        python_loop(buf.read, dst),
        c_loop("read", buf, dst),
    ]
    py_w, c_w, py_r, c_r = alternate(timers, 1, repeats)
    buf.free()
    gib = n / (1 << 30)
    for name, p, c in (("write", py_w, c_w), ("read", py_r, c_r)):
        results[f"{name}_256MiB_python_GiBps"] = gib / p
        results[f"{name}_256MiB_c_GiBps"] = gib / c
        results[f"{name}_256MiB_ratio"] = c / p
        print(
            f"256 MiB {name:5}: buf.{name} {gib / p:6.2f} GiB/s, C {gib / c:6.2f} GiB/s:"
            f" {c / p:.3f}x"
        )


def dlpack(native, loops, repeats, results):
    for label, n in (("64B", 64), ("256MiB", 256 << 20)):
        buf = native.alloc(n, np.uint8)
        array = np.ones(n, np.uint8)
        timers = [
            call_loop(lambda: np.from_dlpack(buf)),
            call_loop(lambda: ferry.from_dlpack(array).free()),
        ]
        t_np, t_ferry = alternate(timers, loops, repeats)
        buf.free()
        results[f"numpy_from_dlpack_{label}_us"] = t_np * 1e6
        results[f"ferry_from_dlpack_{label}_us"] = t_ferry * 1e6
        print(
            f"{label:>6}: numpy.from_dlpack(buf) {t_np * 1e6:5.2f} us,"
            f" ferry.from_dlpack(array) + free {t_ferry * 1e6:5.2f} us"
        )


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="few repeats (a smoke test)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    native = next((d for d in ferry.devices() if d.backend == "native"), None)
    if native is None:
        print("bench_python: no native device", file=sys.stderr)
        return 1
    results = {}
    loops, repeats = (20000, 5) if args.quick else (200000, 21)
    small_transfers(native, loops, repeats, results)
    large_transfers(native, 3 if args.quick else 11, results)
    async_submissions(native, loops // 10, repeats, results)
    dlpack(native, loops // 10, repeats, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

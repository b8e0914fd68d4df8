"""ferry's callbacks into Python (the deleters of buffers over Python memory)
while other threads wait on ferry, and ferry.shutdown() among them.

A deleter needs the GIL (it releases a Python object). None of these may hang:
each runs in a child interpreter with a time limit, so that a hang fails the
test (with what the child printed) instead of blocking the run, and none may
leave an "Exception ignored" behind either.
"""

import subprocess
import sys
import textwrap

import pytest

from conftest import backend_device

TIME_LIMIT = 120  # seconds; each child takes well under one when nothing hangs


def run_child(code: str) -> str:
    """Runs `code` in a fresh interpreter (same ferry, same PYTHONPATH); fails
    when it hangs, exits non-zero or reports an ignored exception. Its stdout."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hung (no end after {TIME_LIMIT} s); it printed: {e.stdout!r} {e.stderr!r}")
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


# A thread writes 256 MiB into the buffer again and again, with the GIL
# released, while the main thread frees the buffer and shuts ferry down: the
# shutdown waits for the write in flight, whose end releases the memory and so
# runs the deleter, which needs the GIL.
WRITER = """
    import threading
    import numpy as np
    import ferry

    N = 256 << 20
    src = np.ones(N, np.uint8)

    def race(make):
        buf = make()
        started = threading.Event()

        def writer():
            started.set()
            try:
                while True:
                    buf.write(src)
            except ferry.StaleBufferError:
                pass

        t = threading.Thread(target=writer)
        t.start()
        started.wait()
        buf.free()
        ferry.shutdown()
        t.join()

    def aligned(align):
        raw = np.zeros(N + align, np.uint8)
        start = (-raw.ctypes.data) % align
        return raw[start : start + N]

    def device(backend):  # each session has its own Device objects
        return next((d for d in ferry.devices() if d.backend == backend), None)

    for _ in range(3):
        race(lambda: device("native").alloc_zero_copy(np.zeros(N, np.uint8)))
        race(lambda: ferry.from_dlpack(np.zeros(N, np.uint8)))
        cl = device("opencl")
        if cl is not None and cl.host_ptr:
            race(lambda: device("opencl").alloc_host_ptr(aligned(max(cl.host_ptr_alignment, 64))))
    print("ok")
"""


def test_free_and_shutdown_while_another_thread_writes():
    assert run_child(WRITER).strip() == "ok"


def test_zero_copy_over_a_ferry_buffer_then_forced_shutdown():
    run_child(
        """
        import numpy as np
        import ferry

        native = next(d for d in ferry.devices() if d.backend == "native")
        x = native.alloc(1024, np.float32)
        z = native.alloc_zero_copy(x)  # a buffer over x's memory (through x's buffer protocol)
        del x  # z's memoryview of x keeps it
        ferry.shutdown(force=True)  # z's deleter drops x, whose collection frees it
        assert z.freed
        """
    )


def test_a_del_that_frees_another_buffer_during_shutdown():
    run_child(
        """
        import numpy as np
        import ferry

        native = next(d for d in ferry.devices() if d.backend == "native")
        other = native.alloc(16, np.float32)

        class Array(np.ndarray):
            def __del__(self):
                other.free()

        array = np.zeros(1024, np.float32).view(Array)
        z = native.alloc_zero_copy(array)
        del array  # z keeps it, until ferry releases z's memory
        ferry.shutdown()  # ...which runs Array.__del__, which frees `other`
        assert z.freed and other.freed
        """
    )


@pytest.mark.skipif(backend_device("native") is None, reason="no native device")
def test_other_threads_run_while_shutdown_waits():
    """ferry.shutdown() does not hold the GIL while it waits for a transfer in
    flight: a ticking thread ticks meanwhile. Timed, so it retries until one
    shutdown waited long enough to tell."""
    out = run_child(
        """
        import threading, time
        import numpy as np
        import ferry

        N = 256 << 20
        src = np.ones(N, np.uint8)
        verdict = "vacuous"
        for attempt in range(20):
            # Each attempt's shutdown ends the session: its devices are asked again.
            native = next(d for d in ferry.devices() if d.backend == "native")
            buf = native.alloc(N, np.uint8)
            ticks, stop, writing = [], threading.Event(), threading.Event()

            def ticker():
                while not stop.is_set():
                    ticks.append(time.monotonic())
                    time.sleep(0.0005)

            def writer():
                writing.set()
                try:
                    while True:
                        buf.write(src)
                except ferry.StaleBufferError:
                    pass

            threads = [threading.Thread(target=ticker), threading.Thread(target=writer)]
            for t in threads:
                t.start()
            writing.wait()
            time.sleep(0.01)
            t0 = time.monotonic()
            ferry.shutdown()
            t1 = time.monotonic()
            stop.set()
            for t in threads:
                t.join()
            if t1 - t0 > 0.04:
                inside = sum(1 for t in ticks if t0 + 0.01 < t < t1 - 0.01)
                verdict = "ticked" if inside >= 3 else f"held: {inside} ticks in {t1 - t0:.3f} s"
                break
        print(verdict)
        """
    )
    assert out.strip() in ("ticked", "vacuous"), out

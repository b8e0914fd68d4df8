"""Two Python threads transferring at once make progress together: the GIL is
released while the bytes move. Shown without timing: while one thread is inside
a single large transfer, the other thread completes small ones. If the GIL
were held for the transfer, the other thread could not run at all during it,
and this would fail however long the transfer took."""

import threading

import numpy as np


def test_transfers_run_while_another_thread_is_inside_one(native):
    big_n = 64 << 20
    big = native.alloc(big_n, np.uint8)
    big_data = np.ones(big_n, np.uint8)
    small = native.alloc(64, np.uint8)
    small_data = np.zeros(64, np.uint8)
    done_by_other = [0]
    stop = threading.Event()
    started = threading.Event()

    def other():
        started.set()
        while not stop.is_set():
            small.write(small_data)
            small.read(small_data)
            done_by_other[0] += 1

    thread = threading.Thread(target=other)
    thread.start()
    started.wait()
    overlapped = 0
    try:
        # Bounded; a handful of tries suffices on a machine with more than one core.
        for _ in range(200):
            before = done_by_other[0]
            big.write(big_data)  # one C call; the other thread runs only if the GIL is released
            if done_by_other[0] > before:
                overlapped += 1
                if overlapped >= 3:
                    break
    finally:
        stop.set()
        thread.join()
    assert overlapped >= 3, f"the other thread progressed during {overlapped} large transfers"
    assert (big.read()[:: 1 << 20] == 1).all()
    big.free()
    small.free()


def test_threads_on_every_device(device):
    """Several threads, each with its own buffer, all at once: each ends with its own data."""
    errors = []

    def worker(seed):
        try:
            data = np.full(1 << 16, seed, np.int32)
            with device.alloc(1 << 16, np.int32) as buf:
                for _ in range(20):
                    buf.write(data)
                    assert (buf.read() == seed).all()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

"""Queues and events: ferry.Queue, ferry.Event, queue= on every transfer, what
an asynchronous operation keeps alive, __dlpack__(stream=...), and the GIL.

Every test runs on every device present (the `device` fixture); the ones that
need two devices take every ordered pair of different backends. With the fake
CUDA driver (ctest python.cuda_fake) a consumer on a CUDA stream of its own
reads a buffer that ferry wrote on a queue.
"""

import ctypes
import gc
import math
import os
import sys
import threading
import time

import numpy as np
import pytest

import ferry
from conftest import DEVICES, device_id

N = 1 << 16


def pattern(n, seed, dtype=np.float32):
    return (np.arange(n, dtype=np.float64) * 3 + seed).astype(dtype)


def test_queue_and_event_objects(device):
    q = ferry.Queue(device)
    assert q.device is device and not q.is_default and q.pending == 0
    assert "ferry.Queue" in repr(q) and device.backend in repr(q)
    d = device.default_queue
    assert d is device.default_queue and d.is_default and d.handle != q.handle
    assert isinstance(q.native(), dict) or True  # UnsupportedError where no native queue yet
    e = ferry.Event()
    assert e.query()  # never recorded: complete
    e.synchronize()
    q.record(e)
    assert q.record() is not e
    q.synchronize()
    assert q.query()
    q.destroy()
    q.destroy()  # again: nothing
    assert "destroyed" in repr(q)
    for call in (q.synchronize, q.query, q.record, lambda: q.wait_event(e), lambda: e.record(q)):
        with pytest.raises(ferry.StaleHandleError, match="destroyed"):
            call()
    with pytest.raises(ferry.InvalidArgumentError, match="default queue"):
        d.destroy()
    e.destroy()
    with pytest.raises(ferry.StaleHandleError):
        e.synchronize()
    with pytest.raises(TypeError):
        ferry.Queue("not a device")
    with pytest.raises(TypeError):
        ferry.Event(1)


def test_native_queue(device):
    with ferry.Queue(device) as q:
        try:
            n = q.native()
        except ferry.UnsupportedError as e:
            assert "native queue" in str(e)
            assert device.backend in ("cuda", "opencl", "vulkan", "metal")
        else:
            assert set(n) == {"device", "context", "queue", "queue_family"}
            if device.backend in ("native", "checked"):
                assert n["queue"] == 0


def test_with_destroys(device):
    b = device.alloc(N, np.float32)
    with ferry.Queue(device) as q:
        b.write(pattern(N, 1), queue=q)
    assert "destroyed" in repr(q) and q.pending == 0
    assert np.array_equal(b.read(), pattern(N, 1))
    b.free()


def test_ordering_on_one_queue(device):
    """Operations on one queue run in the order submitted."""
    q = ferry.Queue(device)
    a = device.alloc(N, np.float32)
    b = device.alloc(N, np.float32)
    outs = []
    for k in range(6):
        a.write(pattern(N, k), queue=q)
        a.copy_to(b, queue=q)
        outs.append(b.read(queue=q))
    q.synchronize()
    for k, out in enumerate(outs):
        assert np.array_equal(out, pattern(N, k)), k
    q.destroy()
    a.free()
    b.free()


def test_queue_on_every_transfer(device):
    q = ferry.Queue(device)
    b = device.alloc(N, np.int32)
    src = np.arange(N, dtype=np.int32)
    b.write(src, queue=q)  # whole
    b.write(np.full(16, -5, dtype=np.int32), offset=100, queue=q)  # a range
    whole = b.read(queue=q)  # into a new array
    out = np.empty(N, dtype=np.int32)
    same = b.read(out, queue=q)  # into `out`
    tail = b.read(offset=N - 8, queue=q)  # a range, new array
    part = np.empty(16, dtype=np.int32)
    b.read(part, offset=100, queue=q)  # a range into `out`
    c = device.alloc(N, np.int32)
    b.copy_to(c, queue=q)
    q.synchronize()
    want = src.copy()
    want[100:116] = -5
    assert same is out
    assert np.array_equal(whole, want) and np.array_equal(out, want)
    assert np.array_equal(tail, want[-8:]) and np.array_equal(part, want[100:116])
    assert np.array_equal(c.read(), want)
    # Records (a custom buffer) through a queue: the array's bytes must match.
    rec = np.dtype([("x", np.float32), ("y", np.int64)])
    r = device.alloc(64, rec)
    values = np.zeros(64, dtype=rec)
    values["x"] = np.arange(64)
    values["y"] = -np.arange(64)
    r.write(values, queue=q)
    back = r.read(queue=q)
    q.synchronize()
    assert np.array_equal(back, values)
    with pytest.raises(ferry.SizeMismatchError, match="bytes"):
        r.write(values[:10], queue=q)
    q.destroy()
    for x in (b, c, r):
        x.free()


def test_checks_at_submission(device):
    """A refused call raises at once, submits nothing, keeps nothing."""
    q = ferry.Queue(device)
    b = device.alloc(N, np.float32)
    b.write(pattern(N, 7))
    with pytest.raises(ferry.KindMismatchError):
        b.write(np.zeros(N, dtype=np.int32), queue=q)
    with pytest.raises(ferry.SizeMismatchError):
        b.write(np.zeros(N - 1, dtype=np.float32), queue=q)
    with pytest.raises(ferry.OutOfRangeError):
        b.write(np.zeros(8, dtype=np.float32), offset=N - 4, queue=q)
    with pytest.raises(ferry.SizeMismatchError):
        b.read(np.zeros(N + 1, dtype=np.float32), queue=q)
    with pytest.raises(TypeError, match="ferry.Queue"):
        b.write(pattern(N, 1), queue=3)
    with pytest.raises(TypeError, match="ferry.Queue"):
        b.copy_to(b, queue="q")
    assert q.pending == 0
    q.synchronize()
    assert np.array_equal(b.read(), pattern(N, 7))
    other = next((d for d in ferry.devices() if d.index != device.index), None)
    if other is not None:
        with ferry.Queue(other) as oq:
            with pytest.raises(ferry.InvalidArgumentError, match="queue"):
                b.write(pattern(N, 1), queue=oq)
    q.destroy()
    b.free()


def test_arrays_kept_until_complete(device):
    """An array handed to an asynchronous call lives until the queue is seen done,
    even when the program drops it at once, and then it is let go."""
    q = ferry.Queue(device)
    b = device.alloc(1 << 20, np.float32)
    src = pattern(1 << 20, 11)
    refs = sys.getrefcount(src)
    b.write(src, queue=q)
    assert q.pending == 1 and sys.getrefcount(src) == refs + 1
    b.write(pattern(1 << 20, 12), queue=q)  # a temporary, dropped by Python at once
    out = b.read(queue=q)
    gc.collect()
    assert q.pending == 3
    q.synchronize()
    assert q.pending == 0 and sys.getrefcount(src) == refs
    assert np.array_equal(out, pattern(1 << 20, 12))
    # An event's synchronisation lets go of what it covers, not of later work.
    b.write(src, queue=q)
    e = q.record()
    e.synchronize()
    assert q.pending == 0
    b.write(src, queue=q)
    e.record(q)
    assert e.query() in (True, False)
    q.synchronize()
    assert q.pending == 0 and sys.getrefcount(src) == refs
    q.destroy()
    b.free()


def test_buffer_freed_while_queued(device):
    q = ferry.Queue(device)
    b = device.alloc(1 << 20, np.float32)
    b.write(pattern(1 << 20, 3), queue=q)
    out = b.read(queue=q)
    b.free()  # succeeds; the memory stays until the read is done
    q.synchronize()
    assert np.array_equal(out, pattern(1 << 20, 3))
    q.destroy()


def test_dropped_queue_waits(device):
    """A queue Python collects with work pending is destroyed once the work is done."""
    b = device.alloc(1 << 20, np.float32)
    q = ferry.Queue(device)
    out = np.zeros(1 << 20, dtype=np.float32)
    b.write(pattern(1 << 20, 21), queue=q)
    b.read(out, queue=q)
    del q
    gc.collect()
    assert np.array_equal(out, pattern(1 << 20, 21))
    b.free()


def test_events_across_queues(device):
    q1, q2 = ferry.Queue(device), ferry.Queue(device)
    a = device.alloc(1 << 20, np.float32)
    b = device.alloc(1 << 20, np.float32)
    for k in range(3):
        a.write(pattern(1 << 20, 30 + k), queue=q1)
        e = q1.record()
        q2.wait_event(e)
        e.destroy()  # the wait stays
        a.copy_to(b, queue=q2)
        q2.synchronize()
        assert np.array_equal(b.read(), pattern(1 << 20, 30 + k)), k
    q1.destroy()
    q2.destroy()
    a.free()
    b.free()


PAIRS = [
    (x.index, y.index)
    for x in DEVICES
    for y in DEVICES
    if x.backend != y.backend and "checked" not in (x.backend, y.backend)
]


@pytest.mark.parametrize(
    "pair", PAIRS, ids=[f"{device_id(ferry.device(a))}-{device_id(ferry.device(b))}" for a, b in PAIRS]
)
def test_events_across_devices(pair):
    """A write on one device's queue, a copy to another backend's device on a
    queue that waits for it through an event."""
    x, y = ferry.device(pair[0]), ferry.device(pair[1])
    qx, qy = ferry.Queue(x), ferry.Queue(y)
    a = x.alloc(1 << 20, np.float32)
    b = y.alloc(1 << 20, np.float32)
    a.write(pattern(1 << 20, 40), queue=qx)
    qy.wait_event(qx.record())
    a.copy_to(b, queue=qy)
    back = b.read(queue=qy)
    qy.synchronize()
    assert np.array_equal(back, pattern(1 << 20, 40))
    qx.destroy()
    qy.destroy()
    a.free()
    b.free()


def test_elapsed(device):
    q = ferry.Queue(device)
    b = device.alloc(1 << 20, np.float32)
    start = q.record()
    b.write(pattern(1 << 20, 1), queue=q)
    stop = q.record()
    stop.synchronize()
    ms = start.elapsed_time(stop)
    assert math.isfinite(ms) and ms >= 0
    with pytest.raises(ferry.InvalidArgumentError):
        start.elapsed_time(ferry.Event())  # never recorded
    with pytest.raises(TypeError):
        start.elapsed_time(q)
    q.destroy()
    b.free()


def test_dlpack_waits_for_queued_work(host_device):
    """np.from_dlpack sees the bytes of writes still queued when it was called."""
    q = ferry.Queue(host_device)
    n = 1 << 22
    b = host_device.alloc(n, np.float32)
    for k in range(4):
        b.write(pattern(n, 50 + k), queue=q)
    view = np.from_dlpack(b)
    assert np.array_equal(view, pattern(n, 53))
    del view
    b.__dlpack__(stream=-1)  # no synchronisation asked: accepted
    q.destroy()
    b.free()


def test_gil_released_while_waiting(native):
    """Other Python threads run while a queue is waited for."""
    q = ferry.Queue(native)
    n = 1 << 23
    b = native.alloc(n, np.float32)
    src = pattern(n, 60)
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        for _ in range(3):  # long enough to see the other thread run
            for _ in range(8):
                b.write(src, queue=q)
            before = counter[0]
            t0 = time.perf_counter()
            q.synchronize()
            waited = time.perf_counter() - t0
            if waited > 0.02:
                break
        assert waited <= 0.02 or counter[0] > before, f"no progress in {waited * 1e3:.1f} ms of waiting"
    finally:
        stop.set()
        t.join()
    q.destroy()
    b.free()


def test_shutdown_with_queues():
    dev = ferry.device(DEVICES[0].index)
    q = ferry.Queue(dev)
    e = ferry.Event()
    b = dev.alloc(1 << 20, np.float32)
    src = pattern(1 << 20, 70)
    refs = sys.getrefcount(src)
    b.write(src, queue=q)
    e.record(q)
    ferry.shutdown()  # waits for every queue
    assert "stale" in repr(q)
    with pytest.raises(ferry.StaleHandleError, match="shutdown"):
        q.synchronize()
    assert q.pending == 0 and sys.getrefcount(src) == refs
    with pytest.raises(ferry.StaleHandleError, match="shutdown"):
        e.query()
    del q, e
    ferry.devices()  # a new session


# ---- a consumer on a CUDA stream of its own (the fake driver here) ----------------------


def cuda_driver():
    """The CUDA driver ferry loaded (FERRY_CUDA_LIBRARY, else libcuda.so.1)."""
    try:
        return ctypes.CDLL(os.environ.get("FERRY_CUDA_LIBRARY") or "libcuda.so.1")
    except OSError:
        return None


def fake_cuda():
    cu = cuda_driver()
    return cu if cu is not None and hasattr(cu, "fake_cuda_make_sticky") else None


CUDA = [d.index for d in DEVICES if d.backend == "cuda"]


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device (ctest python.cuda_fake: the fake driver)")
def test_dlpack_stream_of_a_cuda_consumer():
    """The consumer reads on a non-blocking stream of its own right after
    __dlpack__(stream=...): ferry's queued write has landed by then."""
    cu = cuda_driver()
    dev = ferry.device(CUDA[0])
    n = 1 << 22
    b = dev.alloc(n, np.float32)
    b.write(np.zeros(n, dtype=np.float32))
    q = ferry.Queue(dev)
    b.write(pattern(n, 80), queue=q)  # pageable: staged piece by piece, each delayed by the fake
    ctx, cudev, stream = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_void_p()
    assert cu.cuDeviceGet(ctypes.byref(cudev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), cudev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    assert cu.cuStreamCreate(ctypes.byref(stream), 1) == 0  # CU_STREAM_NON_BLOCKING
    capsule = b.__dlpack__(stream=stream.value)
    back = np.empty(n, dtype=np.float32)
    assert (
        cu.cuMemcpyDtoHAsync_v2(
            back.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(b.device_ptr), ctypes.c_size_t(back.nbytes), stream
        )
        == 0
    )
    assert cu.cuStreamSynchronize(stream) == 0
    assert np.array_equal(back, pattern(n, 80))
    del capsule
    assert cu.cuStreamDestroy_v2(stream) == 0
    assert cu.cuDevicePrimaryCtxRelease_v2(cudev) == 0
    q.destroy()
    b.free()


def hold_queue(cu, q):
    """Holds q's CUDA stream behind a word in mapped pinned memory (the fake's
    cuStreamWaitValue32): later work on q waits until gate[0] = 1. The
    primary context is retained and current. Returns (gate, word, cudev) for
    release_hold."""
    ctx, cudev = ctypes.c_void_p(), ctypes.c_int()
    assert cu.cuDeviceGet(ctypes.byref(cudev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), cudev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    word, word_dev = ctypes.c_void_p(), ctypes.c_uint64()
    assert cu.cuMemHostAlloc(ctypes.byref(word), ctypes.c_size_t(4096), 3) == 0  # PORTABLE | DEVICEMAP
    assert cu.cuMemHostGetDevicePointer_v2(ctypes.byref(word_dev), word, 0) == 0
    gate = ctypes.cast(word, ctypes.POINTER(ctypes.c_uint32))
    gate[0] = 0
    native = ctypes.c_void_p(q.native()["queue"])
    assert cu.cuStreamWaitValue32_v2(native, word_dev, ctypes.c_uint(1), ctypes.c_uint(0)) == 0  # GEQ
    return gate, word, cudev


def release_hold(cu, word, cudev):
    """Frees what hold_queue made (its queue's work done) and releases the context."""
    assert cu.cuMemFreeHost(word) == 0
    assert cu.cuDevicePrimaryCtxRelease_v2(cudev) == 0


@pytest.mark.skipif(not CUDA or fake_cuda() is None, reason="needs the fake CUDA driver (ctest python.cuda_fake)")
def test_dlpack_stream_waits_on_the_device():
    """__dlpack__(stream=s) makes the consumer's stream wait for ferry's queued
    work on the device: it returns while that work is still held back (behind a
    word the test raises later), and the consumer's copy, queued right after,
    still reads the written bytes. stream=0 is refused, None is the legacy
    stream."""
    cu = fake_cuda()
    dev = ferry.device(CUDA[0])
    n = 1 << 20
    b = dev.alloc(n, np.float32)
    b.write(np.zeros(n, dtype=np.float32))
    q = ferry.Queue(dev)
    stream = ctypes.c_void_p()
    gate, word, cudev = hold_queue(cu, q)  # ferry's queue waits for a word on its own stream
    b.write(pattern(n, 81), queue=q)  # held back behind the word
    assert cu.cuStreamCreate(ctypes.byref(stream), 1) == 0  # CU_STREAM_NON_BLOCKING
    pinned = ctypes.c_void_p()
    done = []
    exporter = threading.Thread(target=lambda: done.append(b.__dlpack__(stream=stream.value)))
    exporter.start()
    exporter.join(10)
    returned = bool(done)
    try:
        assert returned, "__dlpack__(stream=...) waited on the host for ferry's queued work"
        assert not q.query()  # still held back
        # Into pinned memory the copy is queued and the call returns (into pageable
        # memory it would return only once done, as CUDA's does).
        assert cu.cuMemHostAlloc(ctypes.byref(pinned), ctypes.c_size_t(4 * n), 1) == 0
        assert cu.cuMemcpyDtoHAsync_v2(pinned, ctypes.c_uint64(b.device_ptr), ctypes.c_size_t(4 * n), stream) == 0
    finally:
        gate[0] = 1
        exporter.join()
    assert cu.cuStreamSynchronize(stream) == 0
    back = np.ctypeslib.as_array(ctypes.cast(pinned, ctypes.POINTER(ctypes.c_float)), shape=(n,)).copy()
    assert cu.cuMemFreeHost(pinned) == 0
    assert np.array_equal(back, pattern(n, 81))
    q.synchronize()
    with pytest.raises(ValueError, match="ambiguous"):
        b.__dlpack__(stream=0)
    b.write(pattern(n, 82), queue=q)
    del done[:]
    capsule = b.__dlpack__()  # None: the legacy stream waits
    assert cu.cuStreamSynchronize(None) == 0
    back2 = np.empty(n, dtype=np.float32)
    dst = back2.ctypes.data_as(ctypes.c_void_p)
    assert cu.cuMemcpyDtoH_v2(dst, ctypes.c_uint64(b.device_ptr), ctypes.c_size_t(back2.nbytes)) == 0
    assert np.array_equal(back2, pattern(n, 82))
    del capsule
    assert cu.cuStreamDestroy_v2(stream) == 0
    release_hold(cu, word, cudev)
    q.destroy()
    b.free()


@pytest.mark.skipif(not CUDA or fake_cuda() is None, reason="needs the fake CUDA driver (ctest python.cuda_fake)")
def test_failure_raised_at_synchronize():
    """A device fault while work is queued is raised by the synchronisation."""
    cu = fake_cuda()
    dev = ferry.device(CUDA[0])
    q = ferry.Queue(dev)
    b = dev.alloc(1 << 20, np.float32)
    # The write is held back behind a word on the queue's own stream until the
    # fault is in (on a busy machine it could otherwise complete first).
    gate, word, cudev = hold_queue(cu, q)
    b.write(pattern(1 << 20, 90), queue=q)
    assert cu.fake_cuda_make_sticky(0, 700) == 0  # CUDA_ERROR_ILLEGAL_ADDRESS, as after a kernel fault
    try:
        gate[0] = 1
        with pytest.raises(ferry.Error) as info:
            q.synchronize()
        assert "700" in str(info.value) or "ILLEGAL" in str(info.value)
        assert q.pending == 0
    finally:
        gate[0] = 1
        cu.fake_cuda_make_sticky(0, 0)
    q.destroy()
    b.free()
    release_hold(cu, word, cudev)


def test_docs_queue_example(device, capsys):
    """docs/PYTHON.md's queue example runs as printed, on every device."""
    docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs", "PYTHON.md")
    if not os.path.exists(docs):
        pytest.skip("docs/PYTHON.md is not beside this copy of the tests")
    with open(docs, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("### Queues and events"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("```\n", section.index("```python"))]
    scope = {"np": np, "ferry": ferry, "dev": device}
    exec(compile(code, docs, "exec"), scope)
    assert np.array_equal(scope["y"], np.ones(1 << 20, np.float32))
    assert np.array_equal(scope["b"].read(), scope["x"])
    assert scope["start"].elapsed_time(scope["written"]) >= 0
    assert "ms for the write" in capsys.readouterr().out
    for q in (scope["up"], scope["down"]):
        q.destroy()

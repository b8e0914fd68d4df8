"""ferry.mpi under mpirun with 2 ranks (the ctest python_mpi; run_mpi_tests.sh).

    mpirun -np 2 python3 mpi_check.py

Not a pytest module (pytest does not collect it): both ranks run every check in
the same order, and a failure on one rank aborts the job (MPI_Abort), so that
the other is not left waiting. Every ordered pair of the devices present (rank 0
on one, rank 1 on the other) at 0, 1, 33 KiB + 1 and 5 MiB + 3 bytes, blocking
and non-blocking, byte for byte and with the bytes around the range untouched;
Status; a message longer than the receive; bcast; allreduce; local_device; a
stale request; bad arguments; and mpi4py itself on ferry buffers.
"""

import sys
import traceback

import numpy as np
from mpi4py import MPI

import ferry
import ferry.mpi as fm

COMM = MPI.COMM_WORLD
RANK = COMM.rank
SIZES = [0, 1, 33 * 1024 + 1, 5 * 1024 * 1024 + 3]
GUARD = 0xAA
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        raise AssertionError(what)


def raises(cls, fn, *args, contains=None, **kwargs):
    try:
        fn(*args, **kwargs)
    except cls as e:
        check(contains is None or contains in str(e), f"{cls.__name__} without {contains!r}: {e}")
        return e
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise {cls.__name__}")


def name(dev):
    return f"{dev.backend}{dev.backend_index}"


def pattern(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def alloc(dev, n, fill=GUARD):
    buf = dev.alloc(n, np.uint8)
    buf.write(np.full(n, fill, np.uint8))
    return buf


def transfer(src, dst, n, tag, mode):
    """Rank 0 sends n bytes from offset 8 of a buffer on `src`; rank 1 receives
    them at offset 5 of one on `dst` (the bytes around stay GUARD)."""
    data = pattern(n, tag)
    if RANK == 0:
        with alloc(src, n + 16) as buf:
            whole = np.full(n + 16, GUARD, np.uint8)
            whole[8 : 8 + n] = data
            buf.write(whole)
            if mode == "blocking":
                fm.send(buf, 1, tag, offset=8, nbytes=n)
            else:
                with fm.isend(buf, 1, tag, offset=8, nbytes=n) as req:
                    check(not req.done, "an isend was done before its wait")
                check(req.done, "the with block did not wait for the isend")
        COMM.Barrier()
        return
    with alloc(dst, n + 16) as buf:
        if mode == "blocking":
            status = fm.recv(buf, 0, tag, offset=5, nbytes=n)
        else:
            req = fm.irecv(buf, 0, tag, offset=5, nbytes=n)
            if tag % 2:
                status = req.test()
                while status is None:
                    status = req.test()
            else:
                status = req.wait()
            check(req.done, "the irecv is not done after it completed")
        COMM.Barrier()
        want = fm.Status(source=0, tag=tag, count=n)
        check(status == want, f"status {status} for {n} bytes with tag {tag}")
        got = buf.read()
        where = f"{mode} {n} bytes {name(src)} -> {name(dst)}"
        check(np.array_equal(got[5 : 5 + n], data), f"{where}: the bytes differ")
        around = np.concatenate([got[:5], got[5 + n :]])
        check(bool((around == GUARD).all()), f"{where}: bytes around the range changed")


def pairs(devices):
    tag = 1
    for src in devices:
        for dst in devices:
            for n in SIZES:
                for mode in ("blocking", "nonblocking"):
                    transfer(src, dst, n, tag, mode)
                    tag += 1
    return tag - 1


def statuses(dev):
    """ANY_SOURCE, ANY_TAG, a receive longer than the message, nbytes=None."""
    if RANK == 0:
        with alloc(dev, 100) as buf:
            fm.send(buf, 1, 77, nbytes=40)
            fm.send(buf, 1, 78)  # nbytes=None: all 100 bytes
    else:
        with alloc(dev, 1000, 0) as buf:
            check(fm.recv(buf) == fm.Status(0, 77, 40), "ANY_SOURCE, ANY_TAG status")
            st = fm.recv(buf, source=MPI.ANY_SOURCE, tag=78, comm=COMM)
            check((st.source, st.tag, st.count) == (0, 78, 100), f"status {st}")
            check(bool((buf.read()[:100] == GUARD).all()), "nbytes=None sent less than the buffer")
    COMM.Barrier()


def too_long(dev):
    """A message longer than the receive: SizeMismatchError, nothing written, and
    the next message arrives as sent."""
    if RANK == 0:
        with alloc(dev, 40000, 3) as buf:
            fm.send(buf, 1, 5)  # 40000 bytes, in pieces
            fm.send(buf, 1, 5, nbytes=100)  # 100 bytes, in one message
            fm.send(buf, 1, 6, nbytes=10)
    else:
        with alloc(dev, 200) as buf:
            e = raises(ferry.SizeMismatchError, fm.recv, buf, 0, 5, nbytes=50)
            check("40000" in str(e) and "50" in str(e), f"the sentence lacks a size: {e}")
            check(bool((buf.read() == GUARD).all()), "a refused message wrote bytes")
            req = fm.irecv(buf, 0, 5, nbytes=50)
            raises(ferry.SizeMismatchError, req.wait)
            check(bool((buf.read() == GUARD).all()), "a refused irecv wrote bytes")
            check(fm.recv(buf, 0, 6) == fm.Status(0, 6, 10), "the message after a refused one")
            check(bool((buf.read()[:10] == 3).all()), "the message after a refused one differs")
    COMM.Barrier()


def broadcasts(devices):
    for i, src in enumerate(devices):
        dst = devices[(i + 1) % len(devices)]
        for root in (0, 1):
            for n in (1, 5 * 1024 * 1024 + 3):
                data = pattern(n, 1000 + n + root)
                dev = src if RANK == root else dst
                with alloc(dev, n + 4) as buf:
                    if RANK == root:
                        buf.write(np.concatenate([data, np.full(4, GUARD, np.uint8)]))
                    fm.bcast(buf, root, COMM, nbytes=n)
                    got = buf.read()
                    where = f"bcast of {n} bytes from {name(src)}, root {root}"
                    check(np.array_equal(got[:n], data), where)
                    check(bool((got[n:] == GUARD).all()), "bcast wrote past its range")


def allreduces(devices):
    n = 100003
    for dev in devices:
        a = (np.arange(n, dtype=np.int64) * (RANK + 3) - 50000 * RANK).astype(np.int32)
        each = [np.arange(n, dtype=np.int64) * (r + 3) - 50000 * r for r in range(COMM.size)]
        want = sum(each).astype(np.int32)
        with dev.alloc(n, np.int32) as s, dev.alloc(n, np.int32) as r:
            s.write(a)
            fm.allreduce(s, r)
            check(np.array_equal(r.read(), want), f"int32 allreduce on {name(dev)}")
            check(np.array_equal(s.read(), a), "allreduce changed its send buffer")
            fm.allreduce(s, op=MPI.MAX)  # in place
            top = np.max(np.array(each), axis=0).astype(np.int32)
            check(np.array_equal(s.read(), top), f"int32 MAX in place on {name(dev)}")
        xs = [np.random.default_rng(r).standard_normal(n).astype(np.float32) for r in range(2)]
        with dev.alloc(n, np.float32) as s:
            s.write(xs[RANK])
            fm.allreduce(s, None, MPI.SUM, COMM)
            want = np.sum(np.array(xs, dtype=np.float64), axis=0)
            close = np.allclose(s.read(), want, rtol=1e-6, atol=1e-6)
            check(close, f"float32 allreduce in place on {name(dev)}")
    with devices[0].alloc(4, np.int32) as a, devices[0].alloc(5, np.int32) as b:
        raises(ferry.SizeMismatchError, fm.allreduce, a, b)
    with devices[0].alloc(4, np.int32) as a, devices[0].alloc(4, np.float32) as b:
        raises(ferry.KindMismatchError, fm.allreduce, a, b)


def local_devices():
    devices = ferry.devices()
    dev = fm.local_device()
    check(isinstance(dev, ferry.Device), f"local_device gave {dev!r}")
    check(dev.index == devices[RANK % len(devices)].index, f"rank {RANK} got device {dev.index}")
    check(fm.local_device(COMM) is dev, "local_device gave another ferry.Device object")
    gpus = [d for d in devices if not d.is_cpu]
    if gpus:
        check(fm.local_device(gpu_only=True).index == gpus[RANK % len(gpus)].index, "gpu_only")
    else:
        raises(ferry.NoDeviceError, fm.local_device, COMM, True)


def stale_request(dev):
    with alloc(dev, 64) as buf:
        if RANK == 0:
            req = fm.isend(buf, 1, 9)
            req.wait()
            raises(ferry.StaleHandleError, req.wait)
            raises(ferry.StaleHandleError, req.test)
        else:
            req = fm.irecv(buf, 0, 9)
            check(req.wait() == fm.Status(0, 9, 64), "stale_request's receive")
            raises(ferry.StaleHandleError, req.wait)
    COMM.Barrier()


def bad_arguments(dev):
    """Refused before anything is sent, on each rank alone."""
    with alloc(dev, 64) as buf:
        raises(TypeError, fm.send, np.zeros(4), 1)
        raises(TypeError, fm.send, buf, "1")
        raises(TypeError, fm.send, buf, 1, comm="world")
        raises(TypeError, fm.recv, buf, offset=1.5)
        raises(TypeError, fm.allreduce, buf, op="sum")
        raises(TypeError, fm.bcast, [1, 2])
        raises(ferry.InvalidArgumentError, fm.send, buf, 1, offset=-1)
        raises(ferry.OutOfRangeError, fm.send, buf, 1, offset=60, nbytes=8)
        raises(ferry.OutOfRangeError, fm.recv, buf, 0, offset=65)
        raises(ferry.InvalidArgumentError, fm.send, buf, 7)  # not a rank
        raises(ferry.InvalidArgumentError, fm.send, buf, 1, -5)  # not a tag
    raises(ferry.StaleBufferError, fm.send, buf, 1)  # freed


def mpi4py_itself(devices):
    """mpi4py takes host-memory buffers directly, and refuses the others,
    pointing to ferry.mpi."""
    for dev in devices:
        if dev.__dlpack_device__()[0] == ferry.DLDeviceType.CPU:
            continue
        with dev.alloc(16, np.uint8) as buf:
            e = raises(BufferError, COMM.Send, buf, dest=1 - RANK, tag=3)
            check("ferry.mpi" in str(e), f"mpi4py's BufferError does not point to ferry.mpi: {e}")
    host = [d for d in devices if d.backend in ("native", "checked")]
    for dev in host:
        data = pattern(1000, 4).view(np.float32)
        with dev.alloc(250, np.float32) as buf:
            if RANK == 0:
                buf.write(data)
                COMM.Send(buf, dest=1, tag=4)
            else:
                COMM.Recv(buf, source=0, tag=4)
                got = buf.read().view(np.uint8)
                check(np.array_equal(got, data.view(np.uint8)), f"mpi4py on {name(dev)}")
    COMM.Barrier()
    return len(host)


def main():
    if COMM.size != 2:
        print(f"mpi_check: needs 2 ranks, has {COMM.size} (mpirun -np 2)")
        return 1
    devices = ferry.devices()
    before = {d.index: d.stats().live_buffers for d in devices}
    n = pairs(devices)
    for dev in devices:
        statuses(dev)
        too_long(dev)
        stale_request(dev)
        bad_arguments(dev)
    broadcasts(devices)
    allreduces(devices)
    local_devices()
    direct = mpi4py_itself(devices)
    after = {d.index: d.stats().live_buffers for d in ferry.devices()}
    check(after == before, f"buffers left behind: {before} -> {after}")
    check(ferry.live_exports() == 0, "DLPack exports left behind")
    COMM.Barrier()
    print(
        f"mpi_check: rank {RANK}: {n} transfers over {len(devices)} devices "
        f"({', '.join(name(d) for d in devices)}), mpi4py directly on {direct}; "
        f"{checks} checks passed",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    try:
        rc = main()
    except BaseException:
        print(f"mpi_check: rank {RANK} failed:", file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        COMM.Abort(1)
    sys.exit(rc)

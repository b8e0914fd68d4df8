"""DLPack between ferry and PyTorch, CuPy and JAX on a CUDA GPU.

Run by hand where there is a GPU and those libraries (the H200 machine:
bindings/python/tests/h200_run.sh runs it); exits 77 without a CUDA device.
Prints one line per check and what was not there; exits 1 if a check failed.
"""

import os
import sys
import traceback

import numpy as np

import ferry

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX: take memory as needed

N = 1 << 20
results = []


def check(name, fn):
    try:
        fn()
        results.append((name, "ok"))
    except ImportError as e:
        results.append((name, f"not run: {e}"))
    except Exception:  # report every failure, go on with the next check
        results.append((name, "FAILED:\n" + traceback.format_exc()))
    print(f"{name}: {results[-1][1]}", flush=True)


def cuda_device():
    return next((d for d in ferry.devices() if d.backend == "cuda"), None)


def torch_consumes_ferry():
    import torch

    dev = cuda_device()
    buf = dev.alloc(N, np.float32)
    buf.write(np.arange(N, dtype=np.float32))
    t = torch.from_dlpack(buf)
    assert t.device.type == "cuda" and t.device.index == buf.__dlpack_device__()[1], t.device
    assert t.data_ptr() == buf.device_ptr
    t.add_(1)  # a PyTorch kernel on ferry's memory
    torch.cuda.synchronize()
    assert (buf.read() == np.arange(N, dtype=np.float32) + 1).all()
    buf.free()  # the tensor keeps the memory
    t.mul_(2)
    torch.cuda.synchronize()
    assert float(t[10]) == 22.0
    del t
    assert ferry.live_exports() == 0


def torch_stream_consumer():
    """torch.from_dlpack on a stream of torch's own passes that stream to
    __dlpack__: the stream waits on the device for ferry's queued write (256 MiB
    from pageable memory, staged), and torch's sum on it sees every byte."""
    import torch

    dev = cuda_device()
    n = 64 << 20
    host = np.arange(n, dtype=np.float32) % 1024
    buf = dev.alloc(n, np.float32)
    buf.write(np.zeros(n, np.float32))
    q = ferry.Queue(dev)
    buf.write(host, queue=q)  # returns at once; ferry's queue moves the bytes
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t = torch.from_dlpack(buf)  # __dlpack__(stream=s.cuda_stream)
        total = t.sum(dtype=torch.float64)
    s.synchronize()
    assert float(total) == float(host.sum(dtype=np.float64)), (float(total), float(host.sum(dtype=np.float64)))
    del t
    q.destroy()
    buf.free()


def cupy_stream_consumer():
    """The same with CuPy on a non-blocking stream of its own."""
    import cupy

    dev = cuda_device()
    n = 64 << 20
    host = np.arange(n, dtype=np.float32) % 1024
    buf = dev.alloc(n, np.float32)
    buf.write(np.zeros(n, np.float32))
    q = ferry.Queue(dev)
    buf.write(host, queue=q)
    with cupy.cuda.Stream(non_blocking=True) as s:
        c = cupy.from_dlpack(buf)  # __dlpack__(stream=s.ptr)
        total = c.sum(dtype=cupy.float64)
    s.synchronize()
    assert float(total) == float(host.sum(dtype=np.float64))
    del c
    q.destroy()
    buf.free()


def ferry_consumes_torch():
    import torch

    dev = cuda_device()
    t = torch.arange(N, device="cuda", dtype=torch.float32)
    buf = ferry.from_dlpack(t)
    assert buf.device is dev and buf.device_ptr == t.data_ptr()
    assert (buf.read() == np.arange(N, dtype=np.float32)).all()
    buf.write(np.zeros(N, np.float32))
    assert int(t.sum()) == 0
    with dev.alloc(N, np.float32) as mine:
        buf.copy_to(mine)  # ferry's copy between foreign and own memory
    buf.free()
    try:
        ferry.from_dlpack(t[::2])
        raise AssertionError("a strided tensor was accepted")
    except ferry.RefusedError as e:
        assert e.refusal == "FERRY_REFUSAL_STRIDED"


def torch_dtypes():
    import torch

    dev = cuda_device()
    for dtype, np_dtype in (
        (torch.float16, np.float16),
        (torch.int64, np.int64),
        (torch.uint8, np.uint8),
        (torch.complex64, np.complex64),
        (torch.bool, np.bool_),
    ):
        buf = dev.alloc(100, np_dtype)
        data = (np.arange(100) % 2).astype(np_dtype)
        buf.write(data)
        t = torch.from_dlpack(buf)
        assert t.dtype == dtype, (t.dtype, dtype)
        assert (t.cpu().numpy() == data).all()
        back = ferry.from_dlpack(t)
        assert back.dtype == np.dtype(np_dtype) and (back.read() == data).all()
        back.free()
        del t
        buf.free()
    bf = torch.ones(8, device="cuda", dtype=torch.bfloat16)
    buf = ferry.from_dlpack(bf)
    assert buf.kind == "bfloat16" and (buf.read() == 0x3F80).all()
    buf.free()


def cupy_both_ways():
    import cupy

    dev = cuda_device()
    buf = dev.alloc(N, np.int32)
    buf.write(np.arange(N, dtype=np.int32))
    c = cupy.from_dlpack(buf)
    c += 5
    cupy.cuda.Device().synchronize()
    assert (buf.read() == np.arange(N) + 5).all()
    del c
    buf.free()
    c = cupy.arange(1000, dtype=cupy.float64)
    buf = ferry.from_dlpack(c)
    assert buf.device is dev and (buf.read() == np.arange(1000.0)).all()
    buf.free()


def jax_both_ways():
    import jax
    import jax.numpy as jnp

    dev = cuda_device()
    buf = dev.alloc(1000, np.float32)
    buf.write(np.arange(1000, dtype=np.float32))
    x = jax.dlpack.from_dlpack(buf)
    assert float(jnp.sum(x)) == float(np.arange(1000).sum())
    buf.free()
    y = jnp.arange(1000, dtype=jnp.float32)
    try:
        back = ferry.from_dlpack(y)
    except ferry.RefusedError as e:  # JAX marks its (immutable) arrays read-only in versioned capsules
        assert e.refusal == "FERRY_REFUSAL_READ_ONLY", e
        return
    assert (back.read() == np.arange(1000, dtype=np.float32)).all()
    back.free()


def main():
    if cuda_device() is None:
        print("SKIP gpu_interop: no cuda device")
        return 77
    check("torch.from_dlpack(ferry CUDA buffer), kernel, free first", torch_consumes_ferry)
    check("ferry.from_dlpack(torch CUDA tensor), strided refused", ferry_consumes_torch)
    check("dtypes both ways (float16, int64, uint8, complex64, bool, bfloat16)", torch_dtypes)
    check("cupy.from_dlpack(ferry buffer) and back", cupy_both_ways)
    check("torch on a stream of its own after ferry's queued write (__dlpack__(stream=))", torch_stream_consumer)
    check("cupy on a non-blocking stream after ferry's queued write (__dlpack__(stream=))", cupy_stream_consumer)
    check("jax.dlpack.from_dlpack(ferry buffer) and back", jax_both_ways)
    return 1 if any(r.startswith("FAILED") for _, r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

"""ferry: one memory API over every compute device on a machine.

The host CPU, CUDA GPUs, OpenCL devices, Vulkan devices and Apple Metal, through
one library (libferry): typed buffers, zero-copy and host-pointer buffers over
NumPy arrays, synchronous transfers, copies between any two devices, and DLPack
in and out, so that buffers go to NumPy, PyTorch, CuPy and JAX without a copy;
queues and events (ferry.Queue, ferry.Event, queue= on the transfers) for work
that runs while Python goes on.

    import numpy as np
    import ferry

    dev = ferry.best()                      # the first GPU, else the host
    with dev.alloc(1000, np.float32) as buf:
        buf.write(np.arange(1000, dtype=np.float32))
        print(buf.read()[:4])

Errors are ferry.Error subclasses, one per ferry status (SizeMismatchError,
KindMismatchError, StaleBufferError, ...), carrying ferry's sentence and .status.
ferry.mpi (imported on its own, over mpi4py) moves buffers of any device across
MPI ranks.
The guide is docs/PYTHON.md in the ferry repository.
"""

import enum

from ._ferry import (
    BackendError,
    BackendInfo,
    Buffer,
    CancelledError,
    Device,
    Error,
    Event,
    InvalidArgumentError,
    KindMismatchError,
    NoDeviceError,
    NotReadyError,
    OutOfMemoryError,
    OutOfRangeError,
    OverflowError,
    Queue,
    RefusedError,
    SizeMismatchError,
    StaleBufferError,
    StaleHandleError,
    Stats,
    UnsupportedError,
    backends,
    best,
    device,
    devices,
    from_dlpack,
    live_exports,
    shutdown,
    stats,
    version,
)

__version__ = "0.1.0"


class DLDeviceType(enum.IntEnum):
    """DLPack's device types, as __dlpack_device__ returns them."""

    CPU = 1
    CUDA = 2
    CUDA_HOST = 3
    OPENCL = 4
    VULKAN = 7
    METAL = 8
    VPI = 9
    ROCM = 10
    ROCM_HOST = 11
    EXT_DEV = 12
    CUDA_MANAGED = 13
    ONEAPI = 14
    WEBGPU = 15
    HEXAGON = 16
    MAIA = 17


__all__ = [
    "BackendError",
    "BackendInfo",
    "Buffer",
    "CancelledError",
    "DLDeviceType",
    "Device",
    "Error",
    "Event",
    "InvalidArgumentError",
    "KindMismatchError",
    "NoDeviceError",
    "NotReadyError",
    "OutOfMemoryError",
    "OutOfRangeError",
    "OverflowError",
    "Queue",
    "RefusedError",
    "SizeMismatchError",
    "StaleBufferError",
    "StaleHandleError",
    "Stats",
    "UnsupportedError",
    "backends",
    "best",
    "device",
    "devices",
    "from_dlpack",
    "live_exports",
    "shutdown",
    "stats",
    "version",
]

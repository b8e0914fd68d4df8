"""ferry buffers of any device across MPI ranks, on mpi4py's communicators.

mpi4py takes a ferry buffer whose memory is host memory (native and checked
devices: ``comm.Send(buf, ...)``, zero-copy). It cannot take OpenCL, Vulkan or
Metal buffers, whose memory it cannot address: for those (and for every buffer,
if you like one call for all), this module runs libferry_mpi, which moves the
bytes through host memory in pieces, overlapping the device's transfers with
MPI's::

    from mpi4py import MPI
    import numpy as np
    import ferry
    import ferry.mpi

    comm = MPI.COMM_WORLD
    dev = ferry.mpi.local_device(comm)          # this rank's device
    with dev.alloc(1 << 20, np.float32) as buf:
        if comm.rank == 0:
            buf.write(np.ones(1 << 20, np.float32))
            ferry.mpi.send(buf, dest=1)
        elif comm.rank == 1:
            status = ferry.mpi.recv(buf, source=0)
        ferry.mpi.allreduce(buf)                # in place, MPI.SUM

Offsets and sizes are in bytes, as in the C API (include/ferry_mpi.h);
``nbytes=None`` is to the end of the buffer. ``comm=None`` is
``MPI.COMM_WORLD``. Errors are ferry's (ferry.SizeMismatchError, ...) with
ferry's sentence; arguments of the wrong type are TypeError. Every call
releases the GIL while it runs. Importing this module imports mpi4py.MPI, which
initialises MPI as mpi4py does.

A ferry message may travel as several MPI messages on its (destination, tag,
communicator): receive it with ferry.mpi only, and send no MPI message of your
own on the same triple while it is in flight. docs/PYTHON.md ("MPI") and
docs/MPI.md are the guides.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from types import TracebackType
from typing import Iterable, List, Optional, Tuple, Type

from ._ferry import Buffer, Device, devices

if importlib.util.find_spec("ferry._mpi") is None:
    raise ImportError(
        "ferry.mpi is not available: this ferry package was built without its MPI "
        "extension (ferry._mpi), which is built only when an MPI compiler wrapper (mpicc) "
        "and mpi4py are present at build time: install them (Debian: apt-get install "
        "libopenmpi-dev python3-mpi4py), then rebuild the package (pip install "
        "./bindings/python, or make install)"
    )
try:
    from . import _mpi
except ImportError as _why:
    raise ImportError(
        f"ferry.mpi is not available: its extension ferry._mpi does not load ({_why}); it "
        "needs mpi4py and the MPI library the package was built with (Debian: "
        "python3-mpi4py, libopenmpi-dev)"
    ) from _why

from mpi4py import MPI

__all__ = [
    "Request",
    "Status",
    "allreduce",
    "bcast",
    "irecv",
    "isend",
    "local_device",
    "recv",
    "send",
    "waitall",
]


@dataclasses.dataclass(frozen=True)
class Status:
    """What a completed receive (or send) says.

    source: the sender's rank; tag: the message's tag; count: the bytes
    received (for a send: the bytes sent).
    """

    source: int
    tag: int
    count: int


def _comm(comm: Optional[MPI.Comm], fn: str) -> MPI.Comm:
    if comm is None:
        return MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise TypeError(
            f"ferry.mpi.{fn}: comm must be an mpi4py MPI.Comm, not {type(comm).__name__}"
        )
    return comm


def _buffer(buf: Buffer, fn: str, what: str = "buf") -> Buffer:
    if not isinstance(buf, Buffer):
        raise TypeError(
            f"ferry.mpi.{fn}: {what} must be a ferry.Buffer, not {type(buf).__name__} "
            "(for NumPy arrays and other host memory, use mpi4py itself)"
        )
    return buf


def _int(value: int, fn: str, what: str) -> int:
    # bool is an int, but a rank or a size given as True is a mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"ferry.mpi.{fn}: {what} must be an int, not {type(value).__name__}")
    return value


def _range(buf: Buffer, offset: int, nbytes: Optional[int], fn: str) -> Tuple[int, int]:
    _buffer(buf, fn)
    _int(offset, fn, "offset")
    if nbytes is None:
        # To the end; an offset past the end is ferry's OutOfRangeError.
        nbytes = max(buf.nbytes - offset, 0) if offset >= 0 else 0
    else:
        _int(nbytes, fn, "nbytes")
    return offset, nbytes


def _status(t: Tuple[int, int, int]) -> Status:
    return Status(source=t[0], tag=t[1], count=t[2])


def send(
    buf: Buffer,
    dest: int,
    tag: int = 0,
    comm: Optional[MPI.Comm] = None,
    *,
    offset: int = 0,
    nbytes: Optional[int] = None,
) -> None:
    """Sends bytes [offset, offset + nbytes) of `buf` to rank `dest` of `comm`.

    Returns once the range may be changed again. Zero bytes is a message too.
    ``dest`` may be MPI.PROC_NULL; ``tag`` is 0 to MPI.TAG_UB.
    """
    offset, nbytes = _range(buf, offset, nbytes, "send")
    dest, tag = _int(dest, "send", "dest"), _int(tag, "send", "tag")
    _mpi._send(buf, offset, nbytes, dest, tag, _comm(comm, "send"))


def recv(
    buf: Buffer,
    source: int = MPI.ANY_SOURCE,
    tag: int = MPI.ANY_TAG,
    comm: Optional[MPI.Comm] = None,
    *,
    offset: int = 0,
    nbytes: Optional[int] = None,
) -> Status:
    """Receives a message of at most `nbytes` into [offset, offset + nbytes) of `buf`.

    Returns its Status (source, tag, count: the bytes received, which may be
    fewer than nbytes). A longer message raises ferry.SizeMismatchError naming
    both sizes; nothing of the range is written then, and the message is taken
    off the channel, so that the sender is not left waiting.
    """
    offset, nbytes = _range(buf, offset, nbytes, "recv")
    source, tag = _int(source, "recv", "source"), _int(tag, "recv", "tag")
    return _status(_mpi._recv(buf, offset, nbytes, source, tag, _comm(comm, "recv")))


class Request:
    """An unfinished isend or irecv.

    It completes exactly once, through wait() or a test() that returns a
    Status; afterwards both raise ferry.StaleHandleError. Until then the
    buffer's range must not be changed (for a receive: not used); the buffer
    stays valid even if it is freed. As a context manager, it waits on exit
    unless it has completed. A pending receive is matched while ferry.mpi runs
    (any recv, wait or test), not in the background: test it now and then.
    """

    __slots__ = ("_id", "_buf", "_done", "_kind")

    def __init__(self, request_id: int, buf: Buffer, kind: str) -> None:
        self._id = request_id
        self._buf: Optional[Buffer] = buf  # kept alive until completion
        self._done = False
        self._kind = kind

    @property
    def done(self) -> bool:
        """Whether the request has completed (through wait() or test())."""
        return self._done

    def _finish(self) -> None:
        self._done = True
        self._buf = None

    def wait(self) -> Status:
        """Waits for the request to complete and returns its Status.

        A failure (ferry.SizeMismatchError for a message longer than an irecv's
        range, ...) ends the request too.
        """
        try:
            result = _mpi._wait(self._id)
        finally:
            self._finish()
        return _status(result)

    def test(self) -> Optional[Status]:
        """The Status if the request has completed (it ends then), else None.

        It moves the request on: an irecv's device part runs in the test that
        finds its bytes arrived.
        """
        try:
            result = _mpi._test(self._id)
        except BaseException:
            self._finish()
            raise
        if result is None:
            return None
        self._finish()
        return _status(result)

    def __enter__(self) -> "Request":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if not self._done:
            self.wait()

    def __repr__(self) -> str:
        return f"<ferry.mpi.Request {self._kind} {'done' if self._done else 'pending'}>"

    def __del__(self) -> None:
        if not getattr(self, "_done", True):
            warnings.warn(
                f"ferry.mpi.Request ({self._kind}) collected without wait(): "
                "its transfer was never completed",
                ResourceWarning,
                stacklevel=2,
            )


def isend(
    buf: Buffer,
    dest: int,
    tag: int = 0,
    comm: Optional[MPI.Comm] = None,
    *,
    offset: int = 0,
    nbytes: Optional[int] = None,
) -> Request:
    """send() without waiting: returns a Request to wait() or test()."""
    offset, nbytes = _range(buf, offset, nbytes, "isend")
    dest, tag = _int(dest, "isend", "dest"), _int(tag, "isend", "tag")
    request_id = _mpi._isend(buf, offset, nbytes, dest, tag, _comm(comm, "isend"))
    return Request(request_id, buf, "isend")


def irecv(
    buf: Buffer,
    source: int = MPI.ANY_SOURCE,
    tag: int = MPI.ANY_TAG,
    comm: Optional[MPI.Comm] = None,
    *,
    offset: int = 0,
    nbytes: Optional[int] = None,
) -> Request:
    """recv() without waiting: returns a Request whose wait() gives the Status.

    Receives take messages in the order they were made, as MPI's own do.
    """
    offset, nbytes = _range(buf, offset, nbytes, "irecv")
    source, tag = _int(source, "irecv", "source"), _int(tag, "irecv", "tag")
    request_id = _mpi._irecv(buf, offset, nbytes, source, tag, _comm(comm, "irecv"))
    return Request(request_id, buf, "irecv")


def waitall(requests: Iterable[Request]) -> List[Status]:
    """Waits for every request, in order; their Statuses.

    Every request is waited for even when one fails; the first failure is then
    raised.
    """
    statuses: List[Status] = []
    first: Optional[BaseException] = None
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(
                f"ferry.mpi.waitall: a ferry.mpi.Request is needed, not {type(r).__name__}"
            )
        try:
            statuses.append(r.wait())
        except Exception as e:  # keep waiting: the others must complete too
            if first is None:
                first = e
    if first is not None:
        raise first
    return statuses


def bcast(
    buf: Buffer,
    root: int = 0,
    comm: Optional[MPI.Comm] = None,
    *,
    offset: int = 0,
    nbytes: Optional[int] = None,
) -> None:
    """Bytes [offset, offset + nbytes) of the root's buffer into the same range
    of every other rank's buffer (each on any device). Collective: every rank
    calls it with the same nbytes and root."""
    offset, nbytes = _range(buf, offset, nbytes, "bcast")
    _mpi._bcast(buf, offset, nbytes, _int(root, "bcast", "root"), _comm(comm, "bcast"))


def allreduce(
    sendbuf: Buffer,
    recvbuf: Optional[Buffer] = None,
    op: MPI.Op = MPI.SUM,
    comm: Optional[MPI.Comm] = None,
) -> None:
    """Reduces every rank's `sendbuf` into every rank's `recvbuf`, element by
    element in the buffers' dtype; recvbuf None: in place, into sendbuf.

    Whole buffers of one dtype and length (else ferry.KindMismatchError,
    ferry.SizeMismatchError). op: MPI.SUM, MPI.PROD, MPI.MIN, MPI.MAX, or any
    operation valid on the dtype's MPI type. float16 and bfloat16 buffers
    (MPI has no type for them) raise ferry.UnsupportedError. Collective.
    """
    _buffer(sendbuf, "allreduce", "sendbuf")
    if recvbuf is None:
        recvbuf = sendbuf
    _buffer(recvbuf, "allreduce", "recvbuf")
    if not isinstance(op, MPI.Op):
        raise TypeError(
            f"ferry.mpi.allreduce: op must be an mpi4py MPI.Op, not {type(op).__name__}"
        )
    _mpi._allreduce(sendbuf, recvbuf, op, _comm(comm, "allreduce"))


def local_device(comm: Optional[MPI.Comm] = None, gpu_only: bool = False) -> Device:
    """The device this rank should use.

    The ranks of one node (those that share memory, in their order in comm)
    take ferry's devices in index order, wrapping around; with gpu_only, only
    devices that are not CPUs count (ferry.NoDeviceError when there are none).
    Collective over comm.
    """
    comm = _comm(comm, "local_device")
    devices()  # starts ferry, so that its devices are counted
    return _mpi._local_device(comm, bool(gpu_only))

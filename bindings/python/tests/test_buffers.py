"""Buffers: every dtype on every device, exact sizes and dtypes, offsets,
copies between devices, the buffer protocol, the context manager."""

import numpy as np
import pytest

import ferry
from conftest import random_array

DTYPES = [
    np.bool_,
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]
KINDS = {
    np.bool_: "bool",
    np.int8: "int8",
    np.uint8: "uint8",
    np.int16: "int16",
    np.uint16: "uint16",
    np.int32: "int32",
    np.uint32: "uint32",
    np.int64: "int64",
    np.uint64: "uint64",
    np.float16: "float16",
    np.float32: "float32",
    np.float64: "float64",
    np.complex64: "complex32",  # ferry counts a complex number's parts
    np.complex128: "complex64",
}
RECORD = np.dtype([("x", np.float32), ("y", np.int64), ("tag", "S4")])


def same_bytes(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_round_trip_every_dtype(device, dtype):
    n = 1001
    data = random_array(dtype, n)
    with device.alloc(n, dtype) as buf:
        assert buf.dtype == np.dtype(dtype)
        assert buf.kind == KINDS[dtype]
        assert len(buf) == buf.size == n and buf.shape == (n,)
        assert buf.itemsize == np.dtype(dtype).itemsize and buf.nbytes == n * buf.itemsize
        assert buf.device is device
        buf.write(data)
        back = buf.read()
        assert same_bytes(back, data)
        out = np.empty(n, dtype)
        assert buf.read(out) is out
        assert same_bytes(out, data)


@pytest.mark.parametrize(
    "dtype", ["float32", "f8", np.dtype("int16"), "bfloat16", RECORD], ids=str
)
def test_dtype_spellings(native, dtype):
    with native.alloc(8, dtype) as buf:
        if dtype == "bfloat16":
            # Raw bits: NumPy has no bfloat16.
            assert buf.kind == "bfloat16" and buf.dtype == np.uint16
        elif dtype is RECORD:
            assert buf.kind == "custom" and buf.itemsize == RECORD.itemsize and buf.dtype == RECORD
        else:
            assert buf.dtype == np.dtype(dtype)


def test_bfloat16_as_bits(device):
    bits = np.array([0x3F80, 0x4000, 0xC040], np.uint16)  # 1.0, 2.0, -3.0
    with device.alloc(3, "bfloat16") as buf:
        buf.write(bits)
        assert (buf.read() == bits).all()
        with pytest.raises(ferry.KindMismatchError):
            buf.write(np.zeros(3, np.float16))


def test_records(device):
    data = np.zeros(5, RECORD)
    data["x"] = [1.5, 2.5, 3.5, 4.5, 5.5]
    data["y"] = [10, 20, 30, 40, 50]
    data["tag"] = b"abcd"
    with device.alloc(5, RECORD) as buf:
        buf.write(data)
        back = buf.read()
        assert back.dtype == RECORD and same_bytes(back, data)
        with pytest.raises(ferry.KindMismatchError, match="records"):
            buf.write(np.zeros(5, np.float64))


def test_empty(device):
    with device.alloc(0, np.float32) as buf:
        buf.write(np.zeros(0, np.float32))
        assert buf.read().shape == (0,)


def test_multidimensional_arrays(device):
    data = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    with device.alloc(24, np.int32) as buf:
        buf.write(data)
        out = np.empty((4, 6), np.int32)
        buf.read(out)
        assert (out.ravel() == data.ravel()).all()


def test_offsets(device):
    with device.alloc(10, np.int64) as buf:
        buf.write(np.arange(10, dtype=np.int64))
        buf.write(np.array([70, 80], np.int64), offset=7)
        assert buf.read(offset=6).tolist() == [6, 70, 80, 9]
        assert buf.read(np.zeros(3, np.int64), offset=0).tolist() == [0, 1, 2]
        assert buf.read(offset=10).shape == (0,)
        with pytest.raises(ferry.OutOfRangeError, match="run past the end"):
            buf.write(np.zeros(4, np.int64), offset=7)
        with pytest.raises(ferry.OutOfRangeError):
            buf.read(offset=11)
        with pytest.raises(ferry.InvalidArgumentError, match="negative"):
            buf.read(offset=-1)


def test_copy_between_every_pair(device):
    data = random_array(np.float32, 4097, seed=5)
    for other in ferry.devices():
        with device.alloc(4097, np.float32) as a, other.alloc(4097, np.float32) as b:
            a.write(data)
            a.copy_to(b)
            assert same_bytes(b.read(), data), (device, other)
    with device.alloc(3, np.bool_) as a, device.alloc(3, np.uint8) as b:
        with pytest.raises(ferry.KindMismatchError):
            a.copy_to(b)
    with device.alloc(3, np.float32) as a:
        with pytest.raises(TypeError):
            a.copy_to(np.zeros(3, np.float32))


def test_non_contiguous_arrays_are_refused(native):
    data = np.arange(20, dtype=np.float32)[::2]
    with native.alloc(10, np.float32) as buf:
        with pytest.raises(ferry.InvalidArgumentError, match="C-contiguous"):
            buf.write(data)
        with pytest.raises(ferry.InvalidArgumentError, match="writable"):
            buf.read(np.frombuffer(bytes(40), np.float32))  # read-only


def test_context_manager_frees(device):
    before = device.stats().live_buffers
    with device.alloc(16, np.uint8) as buf:
        assert device.stats().live_buffers == before + 1
    assert buf.freed and device.stats().live_buffers == before
    buf.free()  # again: nothing happens
    with pytest.raises(ferry.StaleBufferError):
        buf.read()
    assert "freed" in repr(buf)


def test_free_on_collection(device):
    before = device.stats().live_buffers
    buf = device.alloc(16, np.uint8)
    del buf
    assert device.stats().live_buffers == before


def test_buffer_protocol(host_device):
    with host_device.alloc(6, np.float64) as buf:
        buf.write(np.arange(6.0))
        view = memoryview(buf)
        assert view.format == "d" and view.shape == (6,) and view.itemsize == 8
        assert not view.readonly
        array = np.asarray(buf)  # through the buffer protocol: writable, shared
        assert array.ctypes.data == buf.device_ptr
        array[2] = 42.0  # a write through NumPy...
        assert buf.read()[2] == 42.0  # ...is seen by ferry
        buf.write(np.full(6, 3.0))
        assert (array == 3.0).all() and view[0] == 3.0
        del array, view


def test_buffer_protocol_formats(host_device):
    for dtype in DTYPES:
        with host_device.alloc(3, dtype) as buf:
            array = np.asarray(buf)
            assert array.dtype == np.dtype(dtype), dtype
            del array
    with host_device.alloc(3, RECORD) as buf:
        assert memoryview(buf).nbytes == 3 * RECORD.itemsize  # records as bytes


def test_buffer_protocol_keeps_memory_after_free(host_device):
    buf = host_device.alloc(4, np.int32)
    buf.write(np.array([1, 2, 3, 4], np.int32))
    view = memoryview(buf)
    buf.free()
    assert view.tolist() == [1, 2, 3, 4]  # the view holds the memory
    del view


def test_no_buffer_protocol_on_device_memory():
    for dev in ferry.devices():
        if not dev.zero_copy:
            with dev.alloc(4, np.float32) as buf:
                with pytest.raises(BufferError, match="not host memory"):
                    memoryview(buf)


def test_zero_copy(host_device):
    array = np.arange(8, dtype=np.float32)
    with host_device.alloc_zero_copy(array) as buf:
        assert buf.is_zero_copy and buf.device_ptr == array.ctypes.data
        array[0] = 5.0
        assert buf.read()[0] == 5.0
        buf.write(np.full(8, 2.0, np.float32))
        assert (array == 2.0).all()
        buf.write(array)  # from its own array: no copy, only synchronisation
        assert buf.read(array) is array


def test_zero_copy_keeps_the_array_alive(native):
    import sys

    array = np.arange(4, dtype=np.int16)
    refs = sys.getrefcount(array)
    buf = native.alloc_zero_copy(array)
    assert sys.getrefcount(array) == refs + 1
    with pytest.raises(ValueError):
        array.resize(100)  # locked: ferry uses its memory
    buf.free()
    assert sys.getrefcount(array) == refs


def test_zero_copy_unsupported_on_device_memory():
    for dev in ferry.devices():
        if not dev.zero_copy:
            with pytest.raises(ferry.UnsupportedError, match="memory of its own"):
                dev.alloc_zero_copy(np.zeros(4, np.float32))


def test_zero_copy_needs_a_writable_array(native):
    with pytest.raises(ferry.InvalidArgumentError, match="writable"):
        native.alloc_zero_copy(np.frombuffer(bytes(16), np.float32))


def test_host_ptr(device):
    align = max(device.host_ptr_alignment, 64)
    raw = np.zeros(align * 3, np.uint8)
    start = (-raw.ctypes.data) % align
    array = raw[start : start + align].view(np.float32)  # aligned, a whole number of alignments
    array[:] = np.arange(array.size, dtype=np.float32)
    try:
        buf = device.alloc_host_ptr(array)
    except ferry.RefusedError as e:
        assert not device.host_ptr and e.refusal == "FERRY_REFUSAL_UNSUPPORTED"
        return
    with buf:
        assert buf.is_zero_copy == device.zero_copy  # "no transfers needed" only where memory is host memory
        buf.read(array)  # hands the array back to the host
        assert (array == np.arange(array.size)).all()
        other = np.full(array.size, 9.0, np.float32)
        buf.write(other)
        buf.read(array)
        assert (array == 9.0).all()


def test_host_ptr_refusals():
    for dev in ferry.devices():
        if dev.host_ptr and dev.host_ptr_alignment > 1:
            raw = np.zeros(dev.host_ptr_alignment * 2, np.uint8)
            start = (-raw.ctypes.data) % dev.host_ptr_alignment + 1
            with pytest.raises(ferry.RefusedError) as e:
                dev.alloc_host_ptr(raw[start : start + 64])
            assert e.value.refusal == "FERRY_REFUSAL_MISALIGNED"
            assert e.value.status_name == "FERRY_ERROR_REFUSED"


def test_asarray_of_host_memory_is_the_view_dlpack_gives(host_device):
    with host_device.alloc(16, np.float32) as buf:
        buf.write(np.arange(16, dtype=np.float32))
        for array in (np.asarray(buf), buf.__array__()):
            assert array.dtype == np.float32 and array.shape == (16,)
            assert array.ctypes.data == buf.device_ptr == np.from_dlpack(buf).ctypes.data
            array[3] = -1.0  # writable: the buffer's memory
            assert buf.read()[3] == -1.0
            del array
        copied = buf.__array__(copy=True)
        assert copied.ctypes.data != buf.device_ptr and copied[3] == -1.0
        widened = buf.__array__(np.float64)
        assert widened.dtype == np.float64 and widened[3] == -1.0
        with pytest.raises(ValueError):
            buf.__array__(np.float64, copy=False)
        del copied, widened


def test_asarray_of_device_memory_is_refused():
    """As CuPy does: device memory never turns into a NumPy array implicitly (it
    would be a 0-d array of objects); read() is the explicit copy."""
    devices = [d for d in ferry.devices() if not d.zero_copy]
    if not devices:
        pytest.skip("no device with memory of its own")
    for dev in devices:
        with dev.alloc(4, np.float32) as buf:
            buf.write(np.arange(4, dtype=np.float32))
            with pytest.raises(TypeError, match=r"read\(\)"):
                np.asarray(buf)
            with pytest.raises(TypeError, match=r"read\(\)"):
                np.array(buf)
            assert buf.read().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_is_zero_copy_means_the_buffer_is_host_memory(device):
    """True only where the buffer IS the array, with nothing to synchronise."""
    align = max(device.host_ptr_alignment, 64)
    raw = np.zeros(align * 2, np.uint8)
    start = (-raw.ctypes.data) % align
    array = raw[start : start + align]
    try:
        buf = device.alloc_host_ptr(array)
    except ferry.RefusedError:
        return
    with buf:
        assert buf.is_zero_copy == device.zero_copy
    assert "host-pointer" in ferry.Buffer.is_zero_copy.__doc__

"""DLPack from Python: numpy.from_dlpack(buffer), ferry.from_dlpack(x), the
capsule protocol, lifetimes, refusals."""

import gc
import sys

import numpy as np
import pytest

import ferry
from conftest import backend_device, random_array
from dlpack_ctypes import Producer, capsule_name, capsule_tensor

NUMPY_WRITABLE_DLPACK = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


def expected_dl_device(dev):
    if dev.backend in ("native", "checked"):
        return (1, 0)
    return {"cuda": 2, "opencl": 4, "vulkan": 7, "metal": 8}[dev.backend], dev.backend_index


def test_dlpack_device(device):
    with device.alloc(4, np.float32) as buf:
        assert buf.__dlpack_device__() == expected_dl_device(device)
        assert device.__dlpack_device__() == expected_dl_device(device)
        device_type = ferry.DLDeviceType(buf.__dlpack_device__()[0])
        assert device_type.value == expected_dl_device(device)[0]


@pytest.mark.parametrize("max_version", [None, (0, 8), (1, 0), (1, 3), (2, 0)])
def test_capsules(device, max_version):
    with device.alloc(10, np.int16) as buf:
        capsule = buf.__dlpack__(max_version=max_version)
        versioned = max_version is not None and max_version[0] >= 1
        assert capsule_name(capsule) == ("dltensor_versioned" if versioned else "dltensor")
        m = capsule_tensor(capsule)
        t = m.dl_tensor
        if versioned:
            assert (m.version.major, m.flags) == (1, 0)
        assert (t.device.device_type, t.device.device_id) == expected_dl_device(device)
        assert t.ndim == 1 and t.shape[0] == 10 and t.strides[0] == 1 and t.byte_offset == 0
        assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (0, 16, 1)
        assert (t.data or 0) == buf.device_ptr
        assert ferry.live_exports() >= 1
        del capsule, m, t  # never consumed: the capsule frees its tensor


def test_numpy_from_dlpack_shares_memory(host_device):
    with host_device.alloc(1000, np.float64) as buf:
        buf.write(np.arange(1000.0))
        array = np.from_dlpack(buf)
        assert array.dtype == np.float64 and array.shape == (1000,)
        assert array.ctypes.data == buf.device_ptr  # the same memory
        buf.write(np.full(1000, 7.0))  # a write through ferry...
        assert (array == 7.0).all()  # ...is seen by NumPy
        if NUMPY_WRITABLE_DLPACK:
            array[5] = -1.0  # and the other way round
            assert buf.read()[5] == -1.0
        else:
            # NumPy < 2.1 marks every array it takes through DLPack read-only; the
            # buffer protocol gives a writable view of the same memory.
            assert not array.flags.writeable
            np.asarray(buf)[5] = -1.0
            assert array[5] == -1.0 and buf.read()[5] == -1.0
        del array


@pytest.mark.parametrize(
    "dtype", [np.int8, np.uint32, np.int64, np.float16, np.float32, np.complex128]
)
def test_numpy_from_dlpack_dtypes(host_device, dtype):
    data = random_array(dtype, 33)
    with host_device.alloc(33, dtype) as buf:
        buf.write(data)
        array = np.from_dlpack(buf)
        assert array.dtype == np.dtype(dtype) and array.tobytes() == data.tobytes()
        del array


def test_bool_over_dlpack(host_device):
    with host_device.alloc(4, np.bool_) as buf:
        buf.write(np.array([True, False, False, True]))
        capsule = buf.__dlpack__(max_version=(1, 0))
        assert capsule_tensor(capsule).dl_tensor.dtype.code == 6  # kDLBool in versioned capsules
        del capsule
        # NumPy 1.x consumers get unversioned capsules, with the bytes as uint8.
        array = np.from_dlpack(buf)
        assert array.tolist() in ([1, 0, 0, 1], [True, False, False, True])
        del array
        back = ferry.from_dlpack(buf)
        assert back.dtype == np.bool_ or back.dtype == np.uint8
        back.free()


def test_consumer_outlives_del_buf(host_device):
    before = host_device.stats().live_buffers
    buf = host_device.alloc(100, np.int32)
    buf.write(np.arange(100, dtype=np.int32))
    array = np.from_dlpack(buf)
    del buf
    gc.collect()
    # The handle is gone, the memory is not: the array still reads it.
    assert array.sum() == sum(range(100))
    assert host_device.stats().live_buffers == before + 1
    assert ferry.live_exports() == 1
    del array
    gc.collect()
    assert host_device.stats().live_buffers == before
    assert ferry.live_exports() == 0


def test_ferry_from_numpy_shares_memory(host_device):
    array = np.arange(16, dtype=np.float32)
    buf = ferry.from_dlpack(array, device=host_device)
    assert buf.device is host_device and buf.is_zero_copy
    assert buf.device_ptr == array.ctypes.data
    array[3] = 99.0  # a write through NumPy is seen by ferry
    assert buf.read()[3] == 99.0
    buf.write(np.zeros(16, np.float32))  # and the other way round
    assert (array == 0).all()
    buf.free()


def test_ferry_from_numpy_default_device_is_native(native):
    array = np.ones(3, np.int64)
    with ferry.from_dlpack(array) as buf:
        assert buf.device is native and buf.dtype == np.int64


def test_ferry_from_numpy_keeps_the_array(native):
    array = np.arange(10, dtype=np.int16)
    refs = sys.getrefcount(array)
    buf = ferry.from_dlpack(array)
    assert sys.getrefcount(array) > refs  # NumPy's tensor holds it...
    buf.free()
    assert sys.getrefcount(array) == refs  # ...and its deleter ran when ferry freed the buffer


def test_producer_deleter_runs_exactly_once(native):
    for max_version_supported in (True, False):
        array = np.arange(6, dtype=np.float64)
        producer = Producer(array)
        if not max_version_supported:  # a NumPy 1.x-style producer: __dlpack__(stream=None) only
            producer.__dlpack__ = lambda stream=None, _p=producer: Producer.__dlpack__(_p, stream)
        buf = ferry.from_dlpack(producer)
        assert producer.made == 1 and producer.deleted == 0
        assert buf.read().tolist() == array.tolist()
        buf.free()
        assert producer.deleted == 1
        buf.free()
        del buf
        gc.collect()
        assert producer.deleted == 1


def test_a_failed_import_leaves_the_tensor_with_the_producer(native):
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    producer = Producer(array, strides=(1, 3))  # transposed: not contiguous
    with pytest.raises(ferry.RefusedError) as e:
        ferry.from_dlpack(producer)
    assert e.value.refusal == "FERRY_REFUSAL_STRIDED"
    assert "not contiguous" in str(e.value)
    assert producer.deleted == 0  # ferry did not take it (the capsule, not renamed, owns it)


def test_refusals(native):
    cases = [
        (Producer(np.zeros(4, np.float32), readonly=True), "FERRY_REFUSAL_READ_ONLY"),
        (Producer(np.zeros(4, np.float32), major=2), "FERRY_REFUSAL_VERSION"),
        (Producer(np.zeros(4, np.float32), device=(10, 0)), "FERRY_REFUSAL_DEVICE"),
        (Producer(np.zeros(4, np.float32), device=(7, 0)), "FERRY_REFUSAL_DEVICE"),
    ]
    from dlpack_ctypes import DLDataType

    vector = DLDataType(2, 32, 4)  # float32 x4 lanes
    cases.append((Producer(np.zeros(4, np.float32), dtype=vector), "FERRY_REFUSAL_DTYPE"))
    for producer, reason in cases:
        with pytest.raises(ferry.RefusedError) as e:
            ferry.from_dlpack(producer)
        assert e.value.refusal == reason, str(e.value)
        assert producer.deleted == 0


def test_numpy_non_contiguous_is_refused_not_copied(native):
    array = np.arange(20, dtype=np.float64)[::2]
    with pytest.raises(ferry.RefusedError) as e:
        ferry.from_dlpack(array)
    assert e.value.refusal == "FERRY_REFUSAL_STRIDED"


def test_capsule_consumed_once(native):
    with native.alloc(4, np.float32) as buf:
        capsule = buf.__dlpack__()
        first = ferry.from_dlpack(capsule)
        assert capsule_name(capsule) == "used_dltensor"
        with pytest.raises(ferry.InvalidArgumentError, match="consumed once"):
            ferry.from_dlpack(capsule)
        first.free()
        del capsule


def test_round_trip_through_ferry_on_every_device(device):
    data = random_array(np.uint32, 257, seed=9)
    with device.alloc(257, np.uint32) as buf:
        buf.write(data)
        for max_version in (None, (1, 0)):
            capsule = buf.__dlpack__(max_version=max_version)
            with ferry.from_dlpack(capsule) as back:
                assert back.device is device  # the same memory, on the same device
                assert back.device_ptr == buf.device_ptr
                assert back.read().tobytes() == data.tobytes()
                back.write(np.arange(257, dtype=np.uint32))
                assert (buf.read() == np.arange(257)).all()
                buf.write(data)
            used = "used_dltensor" if max_version is None else "used_dltensor_versioned"
            assert capsule_name(capsule) == used
            del capsule


def test_copy_and_dl_device(device):
    data = random_array(np.int32, 64, seed=3)
    with device.alloc(64, np.int32) as buf:
        buf.write(data)
        capsule = buf.__dlpack__(max_version=(1, 0), copy=True)
        m = capsule_tensor(capsule)
        assert m.flags & 2  # IS_COPIED
        assert m.dl_tensor.data != buf.device_ptr
        with ferry.from_dlpack(capsule) as copy:
            assert copy.read().tobytes() == data.tobytes()
            copy.write(np.zeros(64, np.int32))
            assert buf.read().tobytes() == data.tobytes()  # a copy: independent
        del capsule, m
        # The host asks for its own copy of device memory.
        if device.zero_copy:
            capsule = buf.__dlpack__(dl_device=(1, 0), copy=False)  # already there: no copy needed
            del capsule
        else:
            with pytest.raises(BufferError, match="copy=False"):
                buf.__dlpack__(dl_device=(1, 0), copy=False)
            capsule = buf.__dlpack__(dl_device=(1, 0))
            assert capsule_tensor(capsule).dl_tensor.device.device_type == 1
            array = np.from_dlpack(_Capsule(capsule))
            assert array.tobytes() == data.tobytes()
            del array, capsule
        with pytest.raises(BufferError):
            buf.__dlpack__(dl_device=(10, 3))


class _Capsule:
    """Hands NumPy an existing capsule through the protocol."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def test_host_memory_onto_a_gpu_device():
    for dev in ferry.devices():
        if dev.zero_copy or not dev.host_ptr:
            continue
        align = dev.host_ptr_alignment
        raw = np.zeros(align * 3, np.uint8)
        start = (-raw.ctypes.data) % align
        array = raw[start : start + align]
        array[:] = 7
        with ferry.from_dlpack(array, device=dev) as buf:  # a host-pointer buffer over the array
            assert buf.device is dev
            assert (buf.read() == 7).all()


def test_vulkan_and_opencl_export_import():
    for name in ("vulkan", "opencl"):
        dev = backend_device(name)
        if dev is None:
            continue
        with dev.alloc(16, np.float32) as buf:
            buf.write(np.arange(16, dtype=np.float32))
            buf2 = ferry.from_dlpack(buf)
            buf.free()  # the second buffer keeps the memory
            assert buf2.device is dev and buf2.read().tolist() == list(range(16))
            buf2.free()


def test_shutdown_refused_while_exports_live(native):
    buf = native.alloc(4, np.float32)
    array = np.from_dlpack(buf)
    with pytest.raises(BufferError, match="still use ferry memory"):
        ferry.shutdown()
    del array
    buf.free()


def test_a_stream_for_a_handle_device_is_refused(device):
    """An OpenCL, Vulkan or Metal buffer's DLPack data is an object handle:
    __dlpack__(stream=...) is refused (mpi4py passes stream=-1 before it takes
    the data for host memory), and the plain call still exports."""
    with device.alloc(64, np.uint8) as buf:
        kind, _ = buf.__dlpack_device__()
        if kind not in (ferry.DLDeviceType.OPENCL, ferry.DLDeviceType.VULKAN, ferry.DLDeviceType.METAL):
            capsule = buf.__dlpack__(stream=-1)  # host memory or CUDA: accepted
            del capsule
            return
        with pytest.raises(BufferError, match="ferry.mpi") as e:
            buf.__dlpack__(stream=-1)
        assert "handle" in str(e.value)
        capsule = buf.__dlpack__()
        del capsule

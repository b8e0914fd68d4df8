"""Each ferry status as its exception class, with ferry's sentence."""

import ctypes

import numpy as np
import pytest

import ferry
from conftest import backend_device

CLASSES = {
    "FERRY_ERROR_INVALID_ARGUMENT": (ferry.InvalidArgumentError, ValueError),
    "FERRY_ERROR_OVERFLOW": (ferry.OverflowError, OverflowError),
    "FERRY_ERROR_SIZE_MISMATCH": (ferry.SizeMismatchError, ValueError),
    "FERRY_ERROR_KIND_MISMATCH": (ferry.KindMismatchError, TypeError),
    "FERRY_ERROR_OUT_OF_RANGE": (ferry.OutOfRangeError, IndexError),
    "FERRY_ERROR_STALE_BUFFER": (ferry.StaleBufferError, ferry.Error),
    "FERRY_ERROR_UNSUPPORTED": (ferry.UnsupportedError, ferry.Error),
    "FERRY_ERROR_REFUSED": (ferry.RefusedError, ferry.Error),
    "FERRY_ERROR_OUT_OF_MEMORY": (ferry.OutOfMemoryError, MemoryError),
    "FERRY_ERROR_NO_DEVICE": (ferry.NoDeviceError, LookupError),
    "FERRY_ERROR_BACKEND": (ferry.BackendError, ferry.Error),
}


def test_hierarchy():
    for number, (name, (cls, builtin)) in enumerate(CLASSES.items(), start=1):
        assert issubclass(cls, ferry.Error) and issubclass(cls, builtin)
        assert cls.status == number and cls.status_name == name  # ferry_status values
    assert ferry.OverflowError is not OverflowError


def check(excinfo, cls, *needles):
    e = excinfo.value
    assert type(e) is cls
    assert e.status == cls.status and e.status_name == cls.status_name
    for needle in needles:
        assert needle in str(e), str(e)


def test_invalid_argument(native):
    with pytest.raises(ferry.InvalidArgumentError) as e:
        native.alloc(4, object)
    check(e, ferry.InvalidArgumentError, "dtype", "ferry has no kind")
    with pytest.raises(ferry.InvalidArgumentError) as e:
        native.alloc(4, ">f4")
    check(e, ferry.InvalidArgumentError, "big-endian")
    with pytest.raises(ferry.InvalidArgumentError):
        native.alloc(-1)


def test_overflow(native):
    with pytest.raises(ferry.OverflowError) as e:
        native.alloc(2**62, np.float64)
    check(e, ferry.OverflowError, "overflow size_t")


def test_size_mismatch(device):
    with device.alloc(10, np.float32) as buf:
        with pytest.raises(ferry.SizeMismatchError) as e:
            buf.write(np.zeros(9, np.float32))
        check(e, ferry.SizeMismatchError, "host array has 9 float32 elements", "has 10")
        with pytest.raises(ferry.SizeMismatchError):
            buf.read(np.zeros(11, np.float32))
        with device.alloc(11, np.float32) as other:
            with pytest.raises(ferry.SizeMismatchError):
                buf.copy_to(other)


def test_kind_mismatch(device):
    with device.alloc(10, np.float32) as buf:
        with pytest.raises(ferry.KindMismatchError) as e:
            buf.write(np.zeros(10, np.float64))
        check(e, ferry.KindMismatchError, "the array is float64", "holds float32")
        with pytest.raises(ferry.KindMismatchError):
            buf.write(np.zeros(10, np.int32))  # same size, another kind: no conversion
        with device.alloc(10, np.int32) as other:
            with pytest.raises(ferry.KindMismatchError):
                buf.copy_to(other)
    with device.alloc(4, np.uint8) as buf:
        with pytest.raises(ferry.KindMismatchError):
            buf.write(np.zeros(4, np.bool_))  # bool and uint8 are different dtypes


def test_out_of_range(native):
    with native.alloc(4, np.int32) as buf:
        with pytest.raises(ferry.OutOfRangeError) as e:
            buf.write(np.zeros(2, np.int32), offset=3)
        check(e, ferry.OutOfRangeError, "run past the end")


def test_stale(device):
    buf = device.alloc(4, np.int32)
    buf.free()
    uses = (
        lambda: buf.write(np.zeros(4, np.int32)),
        buf.read,
        lambda: buf.__dlpack__(),
        lambda: buf.device_ptr,
    )
    for use in uses:
        with pytest.raises(ferry.StaleBufferError) as e:
            use()
        check(e, ferry.StaleBufferError, "freed")
    with device.alloc(4, np.int32) as other:
        with pytest.raises(ferry.StaleBufferError):
            other.copy_to(buf)


def test_unsupported():
    dev = next((d for d in ferry.devices() if not d.zero_copy), None)
    if dev is None:
        pytest.skip("every device here has host memory")
    with pytest.raises(ferry.UnsupportedError) as e:
        dev.alloc_zero_copy(np.zeros(4, np.float32))
    check(e, ferry.UnsupportedError, "ferry_alloc_zero_copy")


def test_refused(native):
    with pytest.raises(ferry.RefusedError) as e:
        ferry.from_dlpack(np.arange(10.0)[::2])
    check(e, ferry.RefusedError, "not contiguous")
    assert e.value.refusal == "FERRY_REFUSAL_STRIDED"


def test_out_of_memory(native):
    with pytest.raises(ferry.OutOfMemoryError) as e:
        native.alloc(native.max_allocation + 1, np.uint8)
    check(e, ferry.OutOfMemoryError, "the largest buffer")


def test_no_device():
    with pytest.raises(ferry.NoDeviceError) as e:
        ferry.device(10**6)
    check(e, ferry.NoDeviceError, "device index")


def test_backend_error_from_a_broken_guard():
    checked = backend_device("checked")
    if checked is None:
        pytest.skip("no checked device")
    buf = checked.alloc(16, np.uint8)
    ctypes.memset(buf.device_ptr + 16, 0x2A, 1)  # the program's own bug: one byte past the end
    with pytest.raises(ferry.BackendError) as e:
        buf.write(np.zeros(16, np.uint8))
    check(e, ferry.BackendError, "out-of-bounds write", "offset 16")
    with pytest.raises(ferry.BackendError):
        buf.free()  # reported, and released all the same
    assert buf.freed


class _ListDevice:
    """A producer whose __dlpack_device__ answers with a list, not a tuple."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None, max_version=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return [1, 0]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_version": [1, 0]},
        {"max_version": "1.0"},
        {"max_version": (1, 0, 0)},
        {"max_version": (1.0, 0)},
        {"dl_device": [2, 0]},
        {"dl_device": "cpu"},
        {"dl_device": (1, "0")},
        {"stream": 1.5},
        {"stream": "default"},
    ],
)
def test_dlpack_arguments_of_the_wrong_type(native, kwargs):
    """The array API's types, or TypeError: never an internal error of the extension."""
    with native.alloc(4, np.float32) as buf:
        with pytest.raises(TypeError) as e:
            buf.__dlpack__(**kwargs)
        assert not isinstance(e.value, SystemError)
        assert next(iter(kwargs)) in str(e.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"stream": 2**70},
        {"stream": -2},
        {"max_version": (-1, 0)},
        {"dl_device": (2**40, 0)},
        {"dl_device": (1, -(2**40))},
    ],
)
def test_dlpack_arguments_out_of_range(native, kwargs):
    with native.alloc(4, np.float32) as buf:
        with pytest.raises(ValueError) as e:
            buf.__dlpack__(**kwargs)
        assert next(iter(kwargs)) in str(e.value)


def test_dlpack_arguments_that_are_fine(native):
    with native.alloc(4, np.float32) as buf:
        for kwargs in (
            {"max_version": (1, 0)},
            {"max_version": (2**40, 0)},
            {"dl_device": (ferry.DLDeviceType.CPU, 0)},
            {"stream": None},
            {"stream": -1},
            {"stream": 2**64 - 1},
        ):
            capsule = buf.__dlpack__(**kwargs)
            del capsule


def test_a_producer_device_that_is_not_a_tuple():
    with pytest.raises(TypeError, match="__dlpack_device__"):
        ferry.from_dlpack(_ListDevice(np.arange(4.0)))


def test_negative_device_index():
    with pytest.raises(ferry.NoDeviceError) as e:
        ferry.device(-1)
    assert "device index -1" in str(e.value)
    assert "18446744073709551615" not in str(e.value)

"""Devices, backends, version, statistics."""

import numpy as np
import pytest

import ferry


def test_version():
    assert ferry.version() == "0.1.0"
    assert ferry.__version__ == ferry.version()


def test_devices_are_numbered_and_cached():
    devs = ferry.devices()
    assert devs, "the native device always exists unless FERRY_BACKENDS leaves it out"
    assert [d.index for d in devs] == list(range(len(devs)))
    assert ferry.devices()[0] is devs[0]  # one object per device
    for d in devs:
        assert ferry.device(d.index) is d
        assert isinstance(d.name, str) and d.name
        assert d.backend in ("cuda", "metal", "opencl", "vulkan", "native", "checked")
        assert d.total_memory > 0 and d.max_allocation > 0
        assert d.host_ptr_alignment >= 1
        assert repr(d).startswith(f"<ferry.Device {d.index}: {d.backend}")


def test_best_is_a_gpu_or_native():
    best = ferry.best()
    gpus = [d for d in ferry.devices() if not d.is_cpu]
    assert best is (gpus[0] if gpus else next(d for d in ferry.devices() if d.backend == "native"))


def test_no_such_device():
    with pytest.raises(ferry.NoDeviceError) as e:
        ferry.device(1000)
    assert e.value.status_name == "FERRY_ERROR_NO_DEVICE"
    assert "device index 1000" in str(e.value)
    with pytest.raises(LookupError):
        ferry.device(-1)


def test_backends():
    backends = {b.name: b for b in ferry.backends()}
    assert set(backends) >= {"cuda", "metal", "opencl", "vulkan", "native", "checked"}
    for b in backends.values():
        assert isinstance(b.enabled, bool) and isinstance(b.status, str)
        if b.device_count:
            assert b.status == "ok"
    assert sum(b.device_count for b in backends.values()) == len(ferry.devices())


def test_stats(device):
    before = ferry.stats(device)
    assert before == device.stats()
    with device.alloc(100, np.float64) as buf:
        buf.write(np.ones(100))
        buf.read()
        s = ferry.stats(device)
        assert s.live_buffers == before.live_buffers + 1
        assert s.bytes_in_use == before.bytes_in_use + 800
        assert s.h2d_bytes == before.h2d_bytes + 800 and s.h2d_count == before.h2d_count + 1
        assert s.d2h_bytes == before.d2h_bytes + 800 and s.d2h_count == before.d2h_count + 1
    assert ferry.stats(device).live_buffers == before.live_buffers
    with pytest.raises(TypeError):
        ferry.stats("native")


def test_native_handles(device):
    n = device.native()
    assert set(n) == {"device", "context", "queue", "queue_family"}
    if device.backend in ("native", "checked"):
        assert n == {"device": 0, "context": 0, "queue": 0, "queue_family": 0}


def test_synchronize_and_trim(device):
    device.synchronize()
    device.trim()
    assert device.stats().bytes_cached == 0

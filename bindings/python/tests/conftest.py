"""Fixtures: every ferry device present, and the host ones.

The tests import the ferry package from wherever Python finds it (the ctest
builds it next to the build tree and puts it on PYTHONPATH; run_tests.sh says
how). Devices absent here are simply not parametrised; the C tests say which
backends were skipped and why.
"""

import gc

import numpy as np
import pytest

import ferry

DEVICES = ferry.devices()


def device_id(dev):
    return f"{dev.backend}{dev.backend_index}"


# Parametrised by index, and looked up when a test runs: the Device objects of
# a session that a test's ferry.shutdown() ended are stale.
@pytest.fixture(params=[d.index for d in DEVICES], ids=[device_id(d) for d in DEVICES])
def device(request):
    return ferry.device(request.param)


HOST_DEVICES = [d for d in DEVICES if d.zero_copy]


@pytest.fixture(params=[d.index for d in HOST_DEVICES], ids=[device_id(d) for d in HOST_DEVICES])
def host_device(request):
    return ferry.device(request.param)


@pytest.fixture
def native():
    dev = next((d for d in ferry.devices() if d.backend == "native"), None)
    if dev is None:
        pytest.skip("no native device (FERRY_BACKENDS?)")
    return dev


def backend_device(name):
    return next((d for d in ferry.devices() if d.backend == name), None)


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test leaves no DLPack export and no live buffer behind."""
    before = {d.index: d.stats().live_buffers for d in ferry.devices()}
    exports = ferry.live_exports()
    yield
    gc.collect()
    assert ferry.live_exports() == exports
    after = {d.index: d.stats().live_buffers for d in ferry.devices()}
    assert after == before


def random_array(dtype, n, seed=1):
    """n elements of dtype, every byte pattern exercised (raw bytes for floats)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    raw = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
    if dtype == np.bool_:
        return raw[:n] % 2 == 1
    return raw.view(dtype).copy()

"""ferry.shutdown: old devices and buffers are stale, and ferry starts again.

Runs last (the file name sorts last) and leaves ferry running."""

import numpy as np
import pytest

import ferry


def test_shutdown_and_restart():
    dev = ferry.best()
    buf = dev.alloc(4, np.float32)
    imported = ferry.from_dlpack(np.arange(4.0))
    ferry.shutdown()
    assert buf.freed and imported.freed
    with pytest.raises(ferry.StaleBufferError, match="ferry.shutdown"):
        buf.read()
    with pytest.raises(ferry.InvalidArgumentError, match="ferry.shutdown"):
        dev.alloc(4)
    assert "stale" in repr(dev)
    fresh = ferry.best()
    assert fresh is not dev and fresh.index == dev.index
    with fresh.alloc(4, np.float32) as b:
        b.write(np.ones(4, np.float32))
    del buf, imported  # their handles are gone with the old session: nothing to free


def test_forced_shutdown_with_a_consumer():
    native = next(d for d in ferry.devices() if d.backend == "native")
    buf = native.alloc(4, np.float32)
    array = np.from_dlpack(buf)
    ferry.shutdown(force=True)  # the array's memory is released under it: do not read it now
    assert ferry.live_exports() == 1
    del array  # its deleter runs after the shutdown: harmless
    assert ferry.live_exports() == 0
    del buf

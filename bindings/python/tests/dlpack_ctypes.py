"""DLPack's structures in ctypes, for tests that make their own producer (with a
counting deleter) and look inside ferry's capsules."""

import ctypes

DLPACK_CPU = 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER),
]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DELETER_VERSIONED = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER_VERSIONED),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]

pythonapi = ctypes.pythonapi
pythonapi.PyCapsule_New.restype = ctypes.py_object
pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
pythonapi.PyCapsule_IsValid.restype = ctypes.c_int
pythonapi.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def capsule_name(capsule):
    return pythonapi.PyCapsule_GetName(capsule).decode()


def capsule_tensor(capsule):
    """The managed tensor inside an unconsumed capsule (legacy or versioned)."""
    name = capsule_name(capsule)
    pointer = pythonapi.PyCapsule_GetPointer(capsule, name.encode())
    kind = DLManagedTensorVersioned if "versioned" in name else DLManagedTensor
    return ctypes.cast(pointer, ctypes.POINTER(kind)).contents


class Producer:
    """A DLPack producer over a NumPy array, whose deleter counts its calls.

    Each __dlpack__ makes a fresh managed tensor (both forms); `deleted` counts
    deleter calls, `made` tensors handed out."""

    def __init__(
        self, array, strides=None, readonly=False, major=1, device=(DLPACK_CPU, 0), dtype=None
    ):
        self.array = array
        self.strides = strides
        self.readonly = readonly
        self.major = major
        self.device = device
        self.dtype = dtype
        self.made = 0
        self.deleted = 0
        self._keep = []  # ctypes objects alive while a consumer holds them
        self._deleter = DELETER(self._delete)
        self._deleter_versioned = DELETER_VERSIONED(self._delete)

    def _delete(self, _tensor):
        self.deleted += 1

    def __dlpack_device__(self):
        return self.device

    def _tensor(self):
        codes = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
        a = self.array
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        strides = None
        if self.strides is not None:
            strides = (ctypes.c_int64 * len(self.strides))(*self.strides)
        dtype = self.dtype or DLDataType(codes[a.dtype.kind], a.dtype.itemsize * 8, 1)
        t = DLTensor(
            a.ctypes.data,
            DLDevice(*self.device),
            a.ndim,
            dtype,
            shape,
            strides if strides is not None else ctypes.POINTER(ctypes.c_int64)(),
            0,
        )
        self._keep += [shape, strides]
        return t

    def __dlpack__(self, stream=None, max_version=None):
        self.made += 1
        if max_version is not None and max_version[0] >= 1:
            m = DLManagedTensorVersioned(
                DLPackVersion(self.major, 0),
                None,
                self._deleter_versioned,
                1 if self.readonly else 0,
                self._tensor(),
            )
            name = b"dltensor_versioned"
        else:
            m = DLManagedTensor(self._tensor(), None, self._deleter)
            name = b"dltensor"
        self._keep.append(m)
        # No capsule destructor: the test checks the deleter count itself.
        return pythonapi.PyCapsule_New(ctypes.addressof(m), name, None)

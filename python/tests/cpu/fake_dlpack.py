"""A DLPack producer built with ctypes, so that the CPU tests can hand foxhunt arrays of any dtype,
shape and device without torch or a GPU. Its data pointer is never read: every array it makes is
refused before foxhunt would touch memory (or the test has no device to touch it with)."""

import ctypes

KCPU, KCUDA = 1, 2
INT, UINT, FLOAT, BFLOAT, BOOL = 0, 1, 2, 4, 6


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_live = {}  # managed tensors by address, until their deleter runs
deleted = []  # addresses whose deleter ran (the tests check foxhunt gives every tensor back)


@_DELETER
def _delete(ptr):
    deleted.append(ctypes.addressof(ptr.contents))
    _live.pop(ctypes.addressof(ptr.contents), None)


class FakeArray:
    """An object with __dlpack__/__dlpack_device__ describing (device, dtype, shape, strides)."""

    def __init__(self, shape, code=INT, bits=32, device=(KCUDA, 0), strides=None):
        self.shape, self.code, self.bits, self.device, self.strides = tuple(shape), code, bits, device, strides
        self.streams = []  # the stream argument of each __dlpack__ call

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        m = _Managed()
        shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        strides = (ctypes.c_int64 * len(self.shape))(*self.strides) if self.strides else None
        m.dl_tensor.data = 0x1000  # never read (see the module docstring)
        m.dl_tensor.device = _Device(*self.device)
        m.dl_tensor.ndim = len(self.shape)
        m.dl_tensor.dtype = _DataType(self.code, self.bits, 1)
        m.dl_tensor.shape = shape
        m.dl_tensor.strides = strides if strides is not None else ctypes.POINTER(ctypes.c_int64)()
        m.deleter = _delete
        _live[ctypes.addressof(m)] = (m, shape, strides)
        # No capsule destructor: an unconsumed capsule here just leaks the test's small struct.
        return _capsule_new(ctypes.addressof(m), b"dltensor", None)

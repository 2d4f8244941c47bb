"""Counters in shared host memory that one process's CUDA stream writes and another's waits for.

Why: a stream that must wait for another process's stream cannot use an interprocess event unless the
waiting host knows the event was recorded for this step (:mod:`pptl.run.gates` waits on the host for
that), and a host that waits on a later op of its peer can deadlock the two hosts. CUDA's stream memory
operations wait on the GPU for a value in memory, with no kernel and no host in the loop: the writer's
stream stores the value when it gets there, the waiter's stream holds until it reads at least that
value. A kernel that polled instead would take SMs from the compute beside it, the very cost this is
for (``bench/gpu_spin.py``: a waiting NCCL kernel slows the MLP blocks beside it 1.3-1.6x on H200s).

The counters live in a file mapped by every local rank (``/dev/shm`` or the run's folder), registered
with the driver so that the GPUs reach it. Driver entry points come from ``libcuda`` (the ``_v2`` stream
operations are always available from CUDA 12 on); anything missing raises :class:`OSError`, and the
caller runs without the waits.
"""
from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

__all__ = ["StreamFlags"]

_PORTABLE, _DEVICEMAP = 0x1, 0x2
_WAIT_GEQ = 0x0
_SLOT = 4  # a uint32 counter


class _Driver:
    """The four libcuda entry points used here."""

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise OSError(f"libcuda not loadable: {e}") from e

        def fn(*names: str) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
            for n in names:
                f = getattr(lib, n, None)
                if f is not None:
                    f.restype = ctypes.c_int
                    return f
            raise OSError(f"libcuda has no {names[0]}")

        self.register = fn("cuMemHostRegister_v2", "cuMemHostRegister")
        self.register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        self.unregister = fn("cuMemHostUnregister")
        self.unregister.argtypes = [ctypes.c_void_p]
        self.device_pointer = fn("cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer")
        self.device_pointer.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint]
        self.write = fn("cuStreamWriteValue32_v2", "cuStreamWriteValue32")
        self.write.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        self.wait = fn("cuStreamWaitValue32_v2", "cuStreamWaitValue32")
        self.wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise OSError(f"{what} failed (CUresult {rc})")


class StreamFlags:
    """``n`` counters, all zero when the file is made, shared by the local ranks that open ``path``."""

    def __init__(self, path: Path, n: int) -> None:
        self._drv = _Driver()
        self.n = n
        size = max(mmap.PAGESIZE, -(-n * _SLOT // mmap.PAGESIZE) * mmap.PAGESIZE)
        self._fd = os.open(str(path), os.O_RDWR)
        self._map: mmap.mmap | None = None
        self._host = 0
        try:
            if os.fstat(self._fd).st_size < size:
                raise OSError(f"{path}: {os.fstat(self._fd).st_size} bytes, expected {size}")
            self._map = mmap.mmap(self._fd, size)
            self._host = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
            _check(self._drv.register(self._host, size, _PORTABLE | _DEVICEMAP), "cuMemHostRegister")
            dptr = ctypes.c_uint64()
            _check(self._drv.device_pointer(ctypes.byref(dptr), self._host, 0), "cuMemHostGetDevicePointer")
            self._dev = dptr.value
        except Exception:
            self.close()
            raise

    @staticmethod
    def create(path: Path, n: int) -> None:
        """Make the zeroed file (one rank, before any opens it)."""
        size = max(mmap.PAGESIZE, -(-n * _SLOT // mmap.PAGESIZE) * mmap.PAGESIZE)
        path.write_bytes(bytes(size))

    def _addr(self, k: int) -> int:
        if not 0 <= k < self.n:
            raise IndexError(f"counter {k} of {self.n}")
        return self._dev + k * _SLOT

    def write(self, k: int, value: int, stream: int) -> None:
        """When ``stream`` (a raw CUDA stream handle) gets here, counter ``k`` becomes ``value``."""
        _check(self._drv.write(ctypes.c_void_p(stream), self._addr(k), value, 0), "cuStreamWriteValue32")

    def wait(self, k: int, value: int, stream: int) -> None:
        """``stream`` goes on from here once counter ``k`` is at least ``value``."""
        _check(self._drv.wait(ctypes.c_void_p(stream), self._addr(k), value, _WAIT_GEQ), "cuStreamWaitValue32")

    def close(self) -> None:
        if self._host and self._map is not None:
            self._drv.unregister(self._host)
            self._host = 0
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a ctypes view still refers to it; the process is ending
                pass
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

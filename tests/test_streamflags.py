"""The shared counters beside SENDs wait for (pptl.run.streamflags): their file and their bounds.

The stream operations themselves need a GPU (bench/gpu_gate_sends.py runs them); what a CPU can check is
the file every rank maps (whole pages, zeroed, big enough for one uint32 a SEND) and that a counter outside
the plan's SENDs is refused rather than written past the mapping.
"""
from __future__ import annotations

import ctypes.util
import mmap

import pytest

from pptl.run.streamflags import StreamFlags


@pytest.mark.parametrize("n,pages", [(1, 1), (1024, 1), (1025, 2), (2048, 2), (2049, 3)])
def test_the_file_is_whole_pages_of_zeros_with_four_bytes_a_counter(tmp_path, n, pages):
    # 4 bytes a counter: a 4096-byte page holds 1024 of them, the 1025th starts a second page.
    if mmap.PAGESIZE != 4096:
        pytest.skip("worked out for 4 KiB pages")
    p = tmp_path / "g.posted"
    StreamFlags.create(p, n)
    data = p.read_bytes()
    assert len(data) == pages * 4096
    assert data == bytes(len(data))


def _unmapped(n: int, base: int) -> StreamFlags:
    flags = StreamFlags.__new__(StreamFlags)
    flags.n, flags._dev = n, base
    return flags


def test_a_counter_is_four_bytes_past_the_last_and_the_ends_are_refused():
    flags = _unmapped(3, 0x7000_0000)
    assert flags._addr(0) == 0x7000_0000
    assert flags._addr(2) == 0x7000_0008
    with pytest.raises(IndexError):
        flags._addr(3)
    with pytest.raises(IndexError):
        flags._addr(-1)


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="this machine has a CUDA driver")
def test_without_a_driver_it_says_so_and_leaves_the_run_ungated(tmp_path):
    p = tmp_path / "g.posted"
    StreamFlags.create(p, 4)
    with pytest.raises(OSError, match="libcuda"):
        StreamFlags(p, 4)

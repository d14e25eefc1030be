"""Fresh memory for the arrays of a whole iteration: 4 KiB pages, not transparent huge pages.

numpy asks the kernel for transparent huge pages (``madvise``) on every array of 4 MiB or
more. Where the kernel's huge-page defrag setting is ``madvise`` (this project's machine: see
``/sys/kernel/mm/transparent_hugepage/defrag``), the first touch of such an array may wait
for the kernel to assemble and zero 2 MiB pages, at a cost that swings with the machine's
memory: filling a fresh 1 GiB int64 array (``np.full(1 << 27, -1)``) took 0.19 to 3.26 s of
CPU here with huge pages, 0.46 s every time with 4 KiB pages. A whole iteration's plan and
replay at flit scale 1 first-touch a few GB (BERT-large in-switch: 1 GB of packet arrays,
1 GB of per-packet and per-chunk results), so they are allocated under :func:`small_pages`.
The pages only change how the memory is mapped, never a value.

:func:`paused_gc` holds Python's cyclic garbage collector off while a plan or a result makes
its hundred thousand objects (messages, their ranges, the done-at dict): each allocation
burst would otherwise trigger collections that walk every live object, the trace's records
included (BERT-large in-switch's plan: 1.70 → 1.36 CPU s). None of these objects form
reference cycles; what the collector would have freed it frees at its next run after.
"""

import contextlib
import gc

import numpy as np

__all__ = ["paused_gc", "small_pages"]


def _hugepage_switch():
    """numpy's switch for its huge-page advice (private; None where this numpy lacks it)."""
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    return getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)


@contextlib.contextmanager
def small_pages():
    """Arrays allocated inside are not advised to use huge pages; the advice numpy had is
    restored on the way out (it is numpy's global setting: a replay in another thread meanwhile
    allocates alike, which changes its speed, never its results)."""
    switch = _hugepage_switch()
    if switch is None:
        yield
        return
    was = switch(False)
    try:
        yield
    finally:
        switch(was)


@contextlib.contextmanager
def paused_gc():
    """The cyclic garbage collector off inside (on again on the way out if it was on). Like
    numpy's page advice it is process-wide: replays in several threads leave it on once the
    first that found it on is done; it changes only when memory is reclaimed, never a value."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

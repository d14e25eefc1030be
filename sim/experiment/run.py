"""Running an experiment's points (``innet run``, ``innet sweep``) on an executor: in this
process (``jobs = 1``), on a local process pool (``concurrent.futures``), or on a Dask
distributed cluster (``--dask tcp://HOST:PORT``)."""

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from sim.errors import InputError
from sim.experiment.config import points
from sim.experiment.point import run_point

__all__ = ["execute", "progress_printer", "cpu_count"]


def execute(config, jobs=1, dask=None, progress=None):
    """Run every point of ``config``; returns the list of PointResult in report order."""
    todo = points(config)
    results = [None] * len(todo)
    began = time.perf_counter()

    def report(done):
        if progress:
            elapsed = time.perf_counter() - began
            progress(f"[{done}/{len(todo)}] {elapsed:5.1f} s")

    if dask:
        try:
            from distributed import Client
        except ImportError:
            raise InputError("--dask needs the 'distributed' package") from None
        try:
            client = Client(dask, timeout=10)
        except (OSError, TimeoutError) as exc:
            raise InputError(f"--dask {dask}: cannot connect: {exc}") from None
        try:
            futures = [client.submit(run_point, config, *p, pure=False) for p in todo]
            index = {f.key: i for i, f in enumerate(futures)}
            from distributed import as_completed
            for done, future in enumerate(as_completed(futures), 1):
                results[index[future.key]] = future.result()
                report(done)
        finally:
            client.close()
    elif jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(run_point, config, *p): i for i, p in enumerate(todo)}
            from concurrent.futures import as_completed
            for done, future in enumerate(as_completed(futures), 1):
                results[futures[future]] = future.result()
                report(done)
    else:
        for i, p in enumerate(todo):
            if progress:
                progress(f"[{i}/{len(todo)}] running {' '.join(map(str, p))}")
            results[i] = run_point(config, *p)
        report(len(todo))
    return results


def progress_printer(enabled=True):
    """A progress callback writing one updating line to stderr."""
    if not enabled:
        return None
    tty = sys.stderr.isatty()

    def show(text):
        if tty:
            sys.stderr.write("\r\033[K" + text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()
    return show


def cpu_count():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

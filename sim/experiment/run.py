"""Running an experiment's points (``innet run``, ``innet sweep``) on an executor: in this
process (``jobs = 1``), on a local process pool (``concurrent.futures``), or on a Dask
distributed cluster (``--dask tcp://HOST:PORT``); and the run's journal, which keeps each
finished point on disk as it finishes, so an interrupted run can be resumed.

A run directory (``results/<run>/``) holds, besides the report that
:func:`sim.experiment.report.write_results` writes at the end:

``run.json``
    written before the first point: the configuration (``ExperimentConfig`` as a table), the
    command, the points in report order and the wall time of earlier, interrupted sessions;
``points/<n>.json``
    one per finished point, ``n`` its index in report order: the ``PointResult`` as a table.

Each file is written whole or not at all (:func:`sim.files.atomic_writes`)."""

import json
import os
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import fields
from pathlib import Path

from sim.errors import ConfigError, InputError, OutputPathError
from sim.experiment.config import ExperimentConfig, points
from sim.experiment.point import PointResult, run_point
from sim.files import atomic_writes

__all__ = ["execute", "progress_printer", "cpu_count", "RunJournal"]

#: The run directory's files (see the module docstring).
RUN_FILE = "run.json"
POINTS_DIR = "points"
_FORMAT = 1


# A pool worker's state for Ctrl-C (see _quiet_on_interrupt).
_interrupted = False
_in_point = False


def _quiet_on_interrupt():
    """Pool worker initializer. Ctrl-C reaches every process of the terminal's group: the
    parent reports once, and a worker ends quietly (no traceback), at once while it computes a
    point (unfinished anyway), else before it starts the next one. Never while it sends a
    result: the parent would wait forever for the rest of the message. An exception instead of
    the exit would travel back through the pool's queues as the point's result."""
    signal.signal(signal.SIGINT, _leave)


def _leave(signum, frame):
    global _interrupted
    _interrupted = True
    if _in_point:
        os._exit(128 + signum)


def _pooled_point(config, *point):
    """:func:`run_point` in a pool worker, which ends here if interrupted."""
    global _in_point
    _in_point = True
    try:
        if _interrupted:
            os._exit(128 + signal.SIGINT)
        return run_point(config, *point)
    finally:
        _in_point = False


def execute(config, jobs=1, dask=None, progress=None, done=None, on_result=None):
    """Run the points of ``config``; returns the list of PointResult in report order.

    Parameters
    ----------
    done : dict, optional
        Index (in report order) -> PointResult of points already run (a resumed run): kept,
        not run again.
    on_result : callable, optional
        ``on_result(index, result)``, called in this process as each point finishes (before
        the next is awaited): the journal writes the point then.

    Raises
    ------
    InputError
        ``dask`` names no reachable scheduler, or ``distributed`` is missing.
    """
    todo = points(config)
    results = [None] * len(todo)
    for index, result in (done or {}).items():
        results[index] = result
    pending = [i for i in range(len(todo)) if results[i] is None]
    began = time.perf_counter()

    def finish(index, result):
        results[index] = result
        if on_result:
            on_result(index, result)

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
        if progress:
            progress(f"[{len(todo) - len(pending)}/{len(todo)}] {len(pending)} points submitted "
                     f"to {dask}")
        try:
            futures = [client.submit(run_point, config, *todo[i], pure=False) for i in pending]
            index = {f.key: i for f, i in zip(futures, pending)}
            from distributed import as_completed
            for count, future in enumerate(as_completed(futures), len(todo) - len(pending) + 1):
                finish(index[future.key], future.result())
                report(count)
        finally:
            client.close()
    elif jobs > 1:
        if progress:   # the first point takes seconds to finish: say what is under way
            progress(f"[{len(todo) - len(pending)}/{len(todo)}] running {len(pending)} points "
                     f"on {min(jobs, len(pending))} worker processes")
        pool = ProcessPoolExecutor(max_workers=jobs, initializer=_quiet_on_interrupt)
        try:
            futures = {pool.submit(_pooled_point, config, *todo[i]): i for i in pending}
            from concurrent.futures import as_completed
            for count, future in enumerate(as_completed(futures), len(todo) - len(pending) + 1):
                finish(futures[future], future.result())
                report(count)
        except BaseException:
            # Interrupted, or a point failed: start no other point.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    else:
        for count, i in enumerate(pending, len(todo) - len(pending)):
            if progress:
                progress(f"[{count}/{len(todo)}] running {' '.join(map(str, todo[i]))}")
            finish(i, run_point(config, *todo[i]))
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


class RunJournal:
    """A run directory while its points run: the configuration first, then each finished
    point as it finishes (files in the module docstring). :meth:`create` starts a run,
    :meth:`open` takes up an interrupted one.

    Members
    -------
    path : Path
        The run directory.
    config : ExperimentConfig
        The run's configuration (as it ran: ``--no-rtl`` applied).
    command : str
        The command that started the run.
    wall_s : float
        Wall time of the earlier sessions of the run, seconds.
    """

    def __init__(self, path, config, command, wall_s=0.0):
        self.path = Path(path)
        self.config = config
        self.command = command
        self.wall_s = wall_s

    @classmethod
    def create(cls, path, config, command):
        """Make the run directory ``path`` (its parent must exist) and write its ``run.json``.

        Raises
        ------
        OutputPathError
            ``path`` exists (a run is never overwritten) or cannot be made.
        """
        path = Path(path)
        try:
            path.mkdir()
        except FileExistsError:
            raise OutputPathError(f"{path}: exists (a run is never overwritten)") from None
        except OSError as exc:
            raise OutputPathError(f"{path}: cannot create: {exc.strerror}") from None
        journal = cls(path, config, command)
        try:
            (path / POINTS_DIR).mkdir()
            journal._write_run_file()
        except BaseException:
            journal.remove()
            raise
        return journal

    @classmethod
    def open(cls, path):
        """The journal of the run directory ``path``, to resume it.

        Raises
        ------
        OutputPathError
            ``path`` is not a directory, or not a run's (no ``run.json``).
        ConfigError
            Its ``run.json`` is not one innet wrote.
        """
        path = Path(path)
        if not path.is_dir():
            raise OutputPathError(f"{path}: no such run directory")
        run_file = path / RUN_FILE
        if not run_file.is_file():
            raise OutputPathError(f"{path}: not a run directory (no {RUN_FILE}; only runs "
                                  f"started by this version of innet can be resumed)")
        try:
            data = json.loads(run_file.read_text())
            if data.get("format") != _FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {_FORMAT}")
            table = data["config"]
            names = {f.name for f in fields(ExperimentConfig)}
            if set(table) != names:
                raise ValueError(f"config keys {sorted(set(table) ^ names)} differ")
            config = ExperimentConfig(**{k: tuple(v) if isinstance(v, list) else v
                                         for k, v in table.items()})
            if [list(p) for p in points(config)] != data["points"]:
                raise ValueError("the points are not the configuration's")
            journal = cls(path, config, str(data["command"]), float(data["wall_s"]))
        except (OSError, UnicodeDecodeError) as exc:
            raise OutputPathError(f"{run_file}: cannot read: {exc}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{run_file}: not a run file innet wrote: {exc}") from None
        (path / POINTS_DIR).mkdir(exist_ok=True)
        return journal

    def _write_run_file(self):
        data = {"format": _FORMAT, "config": self.config.as_dict(), "command": self.command,
                "points": [list(p) for p in points(self.config)], "wall_s": self.wall_s}
        with atomic_writes([self.path / RUN_FILE]) as (temp,):
            temp.write_text(json.dumps(data, indent=2) + "\n")

    def record(self, index, result):
        """Write the finished point ``index`` (report order), whole or not at all."""
        with atomic_writes([self.path / POINTS_DIR / f"{index}.json"]) as (temp,):
            # (its fields are plain data: asdict's deep copy of the timeline took seconds)
            temp.write_text(json.dumps({f.name: getattr(result, f.name) for f in fields(result)},
                                       default=float) + "\n")

    def finished(self):
        """Index -> PointResult of every point written so far. A file that does not read
        back (not one innet wrote whole) is left out: its point runs again."""
        found = {}
        todo = points(self.config)
        for file in (self.path / POINTS_DIR).glob("*.json"):
            if not file.stem.isdigit() or int(file.stem) >= len(todo):
                continue
            try:
                result = PointResult(**json.loads(file.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            if result.key == tuple(todo[int(file.stem)]):
                found[int(file.stem)] = result
        return found

    def add_wall(self, seconds):
        """Add a session's wall time (an interrupted one) to ``run.json``."""
        self.wall_s += seconds
        self._write_run_file()

    def remove(self):
        """Remove the run directory (nothing of it is worth keeping)."""
        import shutil
        shutil.rmtree(self.path, ignore_errors=True)

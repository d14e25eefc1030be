"""Writing output files all-or-nothing, and where innet keeps its caches."""

import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from sim.errors import OutputPathError

__all__ = ["atomic_writes", "current_umask", "CACHES", "cache_root", "cache_dir", "cache_usage",
           "clean_cache"]


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_writes(paths):
    """Yield temporary paths next to ``paths``; on success rename them all into place, on any
    error remove them, so no partial output is ever left behind.

    Raises
    ------
    OutputPathError
        If a destination directory does not exist or is not writable.
    """
    paths = [Path(p) for p in paths]
    temps = []
    try:
        for path in paths:
            directory = path.parent if str(path.parent) else Path(".")
            if path.is_dir():
                raise OutputPathError(f"{path}: is a directory")
            if not directory.is_dir():
                raise OutputPathError(f"{path}: directory {directory} does not exist")
            try:
                fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
            except OSError as exc:
                raise OutputPathError(f"{path}: cannot write: {exc.strerror}") from None
            os.close(fd)
            os.chmod(temp, 0o666 & ~current_umask())   # mkstemp creates 0600
            temps.append(Path(temp))
        yield temps
        for temp, path in zip(temps, paths):
            os.replace(temp, path)
        temps = []
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)


#: innet's caches, by name: what each holds. Each is a directory of entries (one build or one
#: library each) under :func:`cache_dir`; every entry can be rebuilt, so any can be removed.
#: Builders: sim/cosim/build.py (one build per switch configuration, simulator and
#: toolchain) and sim/model/switch_core.py (one library per source and compiler).
CACHES = {
    "rtl": "simulator builds of the switch, 200-320 MB each",
    "model": "the fast model's compiled C core",
}


def cache_root():
    """Where innet keeps what it can rebuild: ``$XDG_CACHE_HOME/innet``, with ``~/.cache``
    when the variable is unset or empty. Read at each call, so a changed environment (a
    test's ``tmp_path``) takes effect."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "innet"


def cache_dir(name):
    """The directory of the cache ``name`` (a key of :data:`CACHES`): ``cache_root()/<name>``."""
    if name not in CACHES:
        raise ValueError(f"no cache {name!r} (choose from {', '.join(CACHES)})")
    return cache_root() / name


def _disk_bytes(path):
    """Bytes ``path`` occupies on disk (as ``du``: allocated blocks), symbolic links not
    followed."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return 0
    size = getattr(st, "st_blocks", 0) * 512 or st.st_size
    if path.is_dir() and not path.is_symlink():
        for parent, dirs, files in os.walk(path):
            for child in dirs + files:
                try:
                    st = os.lstat(os.path.join(parent, child))
                except FileNotFoundError:   # removed meanwhile (a concurrent build)
                    continue
                size += getattr(st, "st_blocks", 0) * 512 or st.st_size
    return size


def cache_usage(name):
    """``(entries, bytes)`` of the cache ``name``: its top-level entries and the bytes they
    occupy on disk; ``(0, 0)`` when the directory does not exist."""
    directory = cache_dir(name)
    if not directory.is_dir():
        return 0, 0
    entries = list(directory.iterdir())
    return len(entries), sum(_disk_bytes(e) for e in entries)


def _in_use(entry):
    """Whether a process holds the build lock of ``entry`` (sim/cosim/build.py takes an
    exclusive ``flock`` on ``<build>/.lock`` for each run)."""
    lock = entry / ".lock"
    if not lock.is_file():
        return False
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def clean_cache(name):
    """Remove every entry of the cache ``name`` except those a running innet holds; returns
    ``(removed entries, bytes freed, entries kept because in use)``.

    Raises
    ------
    OutputPathError
        An entry cannot be removed (no permission).
    """
    directory = cache_dir(name)
    if not directory.is_dir():
        return 0, 0, 0
    removed = freed = kept = 0
    for entry in sorted(directory.iterdir()):
        size = _disk_bytes(entry)
        try:
            if entry.is_dir() and not entry.is_symlink():
                if _in_use(entry):
                    kept += 1
                    continue
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
        except OSError as exc:
            raise OutputPathError(f"{exc.filename or entry}: cannot remove: "
                                  f"{exc.strerror}") from None
        removed += 1
        freed += size
    return removed, freed, kept

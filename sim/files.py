"""Writing output files all-or-nothing."""

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from sim.errors import OutputPathError

__all__ = ["atomic_writes", "current_umask"]


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

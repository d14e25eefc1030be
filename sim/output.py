"""Writing output files all-or-nothing, and reporting bad input in one line."""

import argparse
import json
import math
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

__all__ = ["UsageError", "atomic_writes", "fail", "current_umask", "emit", "real_number"]


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit status 2."""


def fail(message):
    """Print ``innet: error: message`` to stderr and exit with status 2."""
    print(f"innet: error: {message}", file=sys.stderr)
    raise SystemExit(2)


@contextmanager
def atomic_writes(paths):
    """Yield temporary paths next to ``paths``; on success rename them all into place, on any
    error remove them, so no partial output is ever left behind.

    Raises
    ------
    UsageError
        If a destination directory does not exist or is not writable.
    """
    paths = [Path(p) for p in paths]
    temps = []
    try:
        for path in paths:
            directory = path.parent if str(path.parent) else Path(".")
            if path.is_dir():
                raise UsageError(f"{path}: is a directory")
            if not directory.is_dir():
                raise UsageError(f"{path}: directory {directory} does not exist")
            try:
                fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
            except OSError as exc:
                raise UsageError(f"{path}: cannot write: {exc.strerror}") from None
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


def emit(args, payload, lines):
    """Print ``payload`` as JSON when ``args.json`` is set, else the text ``lines``."""
    if args.json:
        print(json.dumps(payload, indent=2, default=float))
    else:
        print("\n".join(lines))


def real_number(name, minimum=None, exclusive=False):
    """An argparse type: a finite number >= ``minimum`` (> with ``exclusive``), with an exact
    message otherwise."""
    def parse(text):
        try:
            if not text.isascii():   # float() would take other scripts' digits
                raise ValueError(text)
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, not {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} must be finite, not {text!r}")
        if minimum is not None and (value <= minimum if exclusive else value < minimum):
            bound = ("positive" if minimum == 0 else f"greater than {minimum:g}") if exclusive \
                else f"at least {minimum:g}"
            raise argparse.ArgumentTypeError(f"{name} must be {bound}, not {text!r}")
        return value
    return parse

"""Reporting bad input in one line and printing results (text or ``--json``)."""

import argparse
import json
import logging
import math
import sys

__all__ = ["UsageError", "fail", "emit", "real_number", "progress_lines", "show_progress"]


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit status 2."""


def fail(message):
    """Print ``innet: error: message`` to stderr and exit with status 2."""
    print(f"innet: error: {message}", file=sys.stderr)
    raise SystemExit(2)


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


class _StderrNow(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record arrives (tests swap it)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("... %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):   # logging.StreamHandler.__init__ assigns it
        pass


_HANDLER = _StderrNow()


def progress_lines(args, prefix="... "):
    """The one rule for a command's progress: each message a line on stderr (``prefix``
    first), or None under ``--quiet``. ``--json`` does not hide it: stdout is the JSON alone."""
    if getattr(args, "quiet", False):
        return None
    return lambda text: print(f"{prefix}{text}", file=sys.stderr, flush=True)


def show_progress(enabled):
    """Show (or hide) the progress messages models log on the ``innet`` logger — builds,
    long replays — on stderr as ``... message`` lines. Models never print: they log, and the
    command line decides (``--quiet`` hides them: :func:`progress_lines`)."""
    logger = logging.getLogger("innet")
    logger.propagate = False
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)
    logger.setLevel(logging.INFO if enabled else logging.WARNING)

"""The exceptions models raise for bad input, so the command line can tell a user's mistake
from a bug by type alone.

An :class:`InputError`'s message is one line that names the file and the place in it
(``run.toml: [switch] slots: must be 1..4096, not 0``); the command line prints it and exits
with status 2. Hardware parameters have their own, :class:`hw.errors.ParameterError` (``hw/``
imports nothing from ``sim/``).
"""

__all__ = ["InputError", "ConfigError", "OutputPathError"]


class InputError(Exception):
    """Bad input from the user (a trace, a configuration, a path): one line, file and place."""


class ConfigError(InputError, ValueError):
    """A configuration file that does not parse or holds a bad key or value."""


class OutputPathError(InputError, OSError):
    """An output path that cannot be written (no such directory, a directory, no permission)."""

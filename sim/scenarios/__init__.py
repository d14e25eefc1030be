"""Scenarios: the training patterns innet grew from, as runnable files (``innet run
scenarios/X.toml``; docs/scenarios.md).

A scenario file names a **kind**; the kind is a module of this package with

* ``TITLE`` (one line) and ``STUDY`` (the study it reproduces, with its source);
* ``PARAMS``: ``{key: sim.scenarios.config.Param}``, the keys of the file's ``[<kind>]``
  section, each with its type, default, range and help;
* optionally ``validate(config)``: what depends on several keys, returning ``None`` or
  ``(section, key, problem)``;
* ``run(ctx)``: given a :class:`sim.scenarios.common.Context`, build the pattern's traces
  (:class:`sim.scenarios.common.TraceBuilder`), replay them (``ctx.replay``), replay one window
  through the RTL (``ctx.rtl_window``) and return a list of
  :class:`sim.scenarios.common.Section` for the report.

:mod:`sim.scenarios.run` runs one and writes ``report.md``, ``results.json``, the plots and the
traces into the run directory."""

import importlib

__all__ = ["KINDS", "kind_module"]

#: The scenario kinds, one module each.
KINDS = ("easgd", "elastic")


def kind_module(kind):
    """The module of scenario ``kind`` (one of :data:`KINDS`)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    return importlib.import_module(f"sim.scenarios.{kind}")

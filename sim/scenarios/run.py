"""Running a scenario and writing its run directory: ``report.md`` (the study, the sections the
kind wrote, the RTL windows and how well they agree with the model), ``results.json``, the
plots, and ``traces/`` (every trace the scenario replayed, in the trace format)."""

import json
import time
from pathlib import Path

from sim.errors import OutputPathError
from sim.files import atomic_writes
from sim.scenarios import kind_module
from sim.scenarios.common import Context

__all__ = ["run_scenario"]


def run_scenario(config, out_dir, command="innet run", progress=None):
    """Run scenario ``config`` and write its files into ``out_dir`` (all or nothing). Returns
    ``(payload, files)``: the results.json document and the paths written."""
    module = kind_module(config.kind)
    began = time.perf_counter()
    ctx = Context(config, out_dir, progress)
    sections = module.run(ctx)
    wall = time.perf_counter() - began
    payload = {"scenario": config.kind, "title": module.TITLE, "study": module.STUDY,
               "config": {k: v for k, v in config.as_dict().items()}, "command": command,
               "wall_s": wall,
               "sections": {s.title: s.metrics for s in sections},
               "rtl_windows": ctx.windows,
               "traces": [name for name, _, _ in ctx.traces]}
    return payload, _write(config, module, sections, ctx, Path(out_dir), payload)


def _window_lines(windows):
    if not windows:
        return ["No RTL window ran (`[scenario] rtl = false` or `--no-rtl`)."]
    lines = ["| trace | window | switch | packets | RTL cycles | model cycles | exact "
             "deliveries | makespan error | RTL drops |", "|---|---|---|---:|---:|---:|---|---:|---:|"]
    for w in windows:
        drops = sum((w.get("errors") or {}).values())
        lines.append(f"| {w['trace']} | {w['window']} | {w['rtl_switch']} | {w['packets']} | "
                     f"{w['rtl_cycles']} | {w['model_cycles']} | {w.get('exact', 0)}/"
                     f"{w.get('deliveries', 0)} | {w.get('makespan_error', 0):.2%} | {drops} |")
    return lines


def _report(config, module, sections, ctx, payload, plot_names):
    lines = [f"# innet scenario: {module.TITLE}", "",
             f"Study: {module.STUDY}", "",
             f"Command: `{payload['command']}` ({payload['wall_s']:.1f} s); configuration "
             f"`{config.source}`: {config.workload} (batch "
             f"{ctx.workload.batch} per GPU) on {ctx.gpu.name}, algorithms "
             f"{', '.join(config.algorithms)}; switch {config.lanes} lanes, {config.slots} "
             f"slots, {config.chunk_flits}-flit chunks.", ""]
    for s in sections:
        lines += [f"## {s.title}", ""] + s.lines + [""]
        lines += [f"![{name}]({name})" for name, _ in s.figures]
        if s.figures:
            lines.append("")
    lines += ["## RTL in the loop", "",
              "The bucket-0 window of the trace named was replayed through the exported RTL "
              "switch under cocotb and through the fast model; deliveries are compared packet "
              "by packet (sim/experiment/point.py).", ""] + _window_lines(ctx.windows) + [""]
    lines += ["## Files", "", "Traces replayed (innet trace format, `innet trace info`): "
              + ", ".join(f"`traces/{n}`" for n, _, _ in ctx.traces) + "."]
    if plot_names:
        lines.append("Plots: " + ", ".join(f"`{n}`" for n in plot_names) + ".")
    return "\n".join(lines) + "\n"


def _write(config, module, sections, ctx, out_dir, payload):
    from sim.trace.format import write_trace
    figures = [f for s in sections for f in s.figures]
    try:
        (out_dir / "traces").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputPathError(f"{out_dir}: cannot create: {exc.strerror}") from None
    for name, meta, records in ctx.traces:   # each written whole or not at all, validated
        write_trace(out_dir / "traces" / name, meta, records)
    names = ["report.md"] + [n for n, _ in figures] + ["results.json"]
    with atomic_writes([out_dir / n for n in names]) as temps:
        temps[0].write_text(_report(config, module, sections, ctx, payload,
                                    [n for n, _ in figures]))
        for temp, (_, figure) in zip(temps[1:-1], figures):
            figure.savefig(temp, format="png", dpi=110, bbox_inches="tight")
        temps[-1].write_text(json.dumps(payload, indent=2, default=_plain) + "\n")
    import matplotlib.pyplot as plt
    for _, figure in figures:
        plt.close(figure)
    return [out_dir / n for n in names] + [out_dir / "traces"]


def _plain(value):
    """numpy scalars and tuples in results.json."""
    try:
        return value.item()
    except AttributeError:
        return str(value)

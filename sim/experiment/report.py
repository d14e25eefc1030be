"""Writing an experiment's ``results/<run>/``: results.json, results.csv, report.md and the
plots (``innet run``, ``innet sweep``). The tables are :mod:`sim.experiment.tables`'s, the words
:mod:`sim.experiment.answer`'s.

report.md answers the run's question before it shows tables: a few paragraphs written from the
run's numbers (how much backprop slows per workload and algorithm, the SM / HBM / link causes,
what in-switch reduction recovers against ring and tree and where it does not pay, what
arbitration changed, the caveats), then the setup (GPUs, batch, precision, buckets, the switch
and what each policy does, flit scale and cycle time), the per-point table, and the metrics
defined inline. The definitions are inline rather than linked because a relative link to the
repository's docs/metrics.md does not resolve from ``results/<run>/`` and an absolute one
breaks when the results are copied or archived; the report names docs/metrics.md (and its
path, when run from a source tree) for the full definitions. Policies that give identical
results at a point share one row (``rr=prio``), in report.md and on the terminal."""

import csv
import io
import json
from pathlib import Path

from sim.errors import OutputPathError
from sim.experiment.answer import answer, glossary, setup
from sim.experiment.tables import arbiter_label, markdown_table, merge_policies, point_row
from sim.experiment.timeline import COMM_TID, COMPUTE_TID, chrome_trace
from sim.files import atomic_writes

__all__ = ["write_results"]


def write_results(config, results, out_dir, wall_s, command):
    """Write results.json, results.csv, report.md and the plots into ``out_dir`` (all or
    nothing; results.json is renamed into place last, so its presence marks a complete run).

    Raises
    ------
    OutputPathError
        ``out_dir`` cannot be made or written.
    """
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputPathError(f"{out_dir}: cannot create: {exc.strerror}") from None
    rows = [point_row(r) for r in results]
    payload = {"config": config.as_dict(), "command": command, "wall_s": wall_s,
               "points": [{**point_row(r), "validation": r.validation} for r in results]}
    buf = io.StringIO()
    keys = list(rows[0])
    for row in rows[1:]:
        keys += [k for k in row if k not in keys]
    writer = csv.DictWriter(buf, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    plots = _plots(results)
    names = (["results.json", "results.csv", "report.md", "timeline.json"]
             + [name for name, _ in plots])
    with atomic_writes([out_dir / n for n in names[1:] + names[:1]]) as temps:
        temps[-1].write_text(json.dumps(payload, indent=2, default=float) + "\n")
        temps[0].write_text(buf.getvalue())
        temps[1].write_text(_report(config, results, wall_s, command, [n for n, _ in plots]))
        temps[2].write_text(json.dumps(chrome_trace(
            [(_label(r), r.timeline) for r in results if r.timeline.get("gpus")]),
            default=float))
        for temp, (_, figure) in zip(temps[3:-1], plots):
            figure.savefig(temp, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt
    for _, figure in plots:
        plt.close(figure)
    return [out_dir / n for n in names]


def _label(r):
    return f"{r.workload} {r.bucket_mb:g} MiB {r.algo} {r.policy} {r.traffic}"


def _report(config, results, wall_s, command, plot_names):
    rows = [point_row(r) for r in results]
    source = ("the embedded default" if config.source == "<default>"
              else f"`{config.source}`")
    lines = [f"# innet run: {config.name}", "",
             (f"Command: `{command}` ({wall_s:.1f} s); configuration: {source} "
              "(`--print-config` prints it in full). Metrics are defined under "
              "[Metrics](#metrics) below."), ""]
    for paragraph in answer(config, rows):
        lines += [paragraph, ""]
    lines += ["## Setup", ""] + setup(config, rows) + [""]
    lines += ["## Backprop slowdown and its causes", "", markdown_table(rows), ""]
    lines += ["## Metrics", ""] + glossary() + [""]
    checked = [r for r in results if "packets" in r.validation]
    shared = ""
    if any(r.validation["rtl_policy"] != r.policy for r in checked):
        shared = (". Round-robin windows run on the priority build with every priority equal, "
                  "which is round-robin (one build for both policies; the exact-delivery "
                  "column checks it)")
    if checked:
        lines += ["## RTL in the loop", "",
                  "The first bucket window of every point replayed through the RTL switch "
                  f"({config.sim}, cocotb) and through the fast model{shared}:", "",
                  "| point | RTL switch | packets | RTL cycles | exact deliveries | "
                  "delivery MAE | makespan error | RTL errors |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in checked:
            v = r.validation
            lines.append(f"| {r.workload} {r.algo} {r.policy} | "
                         f"{v['rtl_switch']} | {v['packets']} | "
                         f"{v['rtl_cycles']} | {v['exact']}/{v['deliveries']} | "
                         f"{v['mae_fraction']:.3%} | {v['makespan_error']:.3%} | "
                         f"{sum(v['errors'].values())} |")
        lines.append("")
    full = [r for r in results if r.validation.get("full_window")]
    if full:
        lines += ["## RTL full bucket windows", "",
                  "Each point's full bucket window (the first bucket of the size closest to "
                  "bucket_mb, with the memory traffic issued while it is under way) at flit "
                  f"scale 1, replayed through the RTL switch ({config.sim}) and the fast model "
                  "(`rtl_windows`, docs/metrics.md):", "",
                  "| point | bucket | RTL switch | packets | RTL cycles | model cycles | "
                  "real µs | exact deliveries | makespan error | RTL errors | RTL wall s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in full:
            v = r.validation["full_window"]
            lines.append(f"| {r.workload} {r.algo} {r.traffic} {r.policy} | "
                         f"{r.metrics.get('window_bucket_mb', 0):.1f} MiB | "
                         f"{v['rtl_switch']} | {v['packets']:,} | {v['rtl_cycles']:,} | "
                         f"{v['model_cycles']:,} | {v['real_us']:,.1f} | "
                         f"{v.get('exact', 0)}/{v.get('deliveries', 0)} | "
                         f"{v.get('makespan_error', 0):.3%} | {sum(v['errors'].values())} | "
                         f"{v['rtl_wall_s']:.1f} |")
        lines.append("")
    lines += ["## Plots", ""] + [f"![{n}]({n})" for n in plot_names] + [""]
    return "\n".join(lines)


def _plots(results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = []
    traffic = any(r.traffic != "dp" for r in results)
    several_buckets = len({r.bucket_mb for r in results}) > 1
    # One bar per point and outcome, as the tables have one row: policies that gave identical
    # results at a point share a bar labelled rr=prio instead of drawing it twice.
    rows = [point_row(r) for r in results]
    result_of = {id(row): r for row, r in zip(rows, results)}
    merged = [(result_of[id(row)], policies) for row, policies in merge_policies(rows)]
    bars = [r for r, _ in merged]
    labels = [f"{r.workload}\n{r.algo}\n{arbiter_label(policies)}"
              + (f"\n{r.traffic}" if traffic else "")
              + (f"\n{r.bucket_mb:g} MiB" if several_buckets else "") for r, policies in merged]
    fig, ax = plt.subplots(figsize=(max(6, 0.75 * len(bars)), 4.5))
    bottom = [0.0] * len(bars)
    for key, name, color in (("slowdown_sm", "SM", "#4c72b0"), ("slowdown_hbm", "HBM", "#dd8452"),
                             ("slowdown_l2", "L2", "#8172b3"), ("slowdown_link", "link", "#55a868")):
        values = [100 * r.metrics[key] for r in bars]
        ax.bar(range(len(bars)), values, bottom=bottom, label=name, color=color)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(range(len(bars)), labels, fontsize=7)
    ax.set_ylabel("backprop slowdown, %")
    ax.set_title("Backprop slowdown from overlapping the all-reduce, by cause")
    ax.set_ylim(0, max(max(bottom) * 1.15, 0.1))
    ax.legend(loc="upper left")
    fig.tight_layout()
    plots.append(("slowdown.png", fig))

    fig, ax = plt.subplots(figsize=(max(6, 0.75 * len(bars)), 4.5))
    ax.bar(range(len(bars)), [r.metrics["exposed_comm_ms"] for r in bars],
           color="#c44e52", label="exposed communication")
    ax.set_xticks(range(len(bars)), labels, fontsize=7)
    ax.set_ylabel("ms")
    ax.set_title("Exposed communication per iteration")
    fig.tight_layout()
    plots.append(("exposed.png", fig))

    buckets = sorted({r.bucket_mb for r in results})
    if len(buckets) > 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        for key in sorted({(r.workload, r.algo, r.policy) for r in results}):
            pts = sorted((r.bucket_mb, r.metrics["allreduce_ms"]) for r in results
                         if (r.workload, r.algo, r.policy) == key)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=" ".join(key))
        ax.set_xscale("log")
        ax.set_xlabel("bucket size, MiB")
        ax.set_ylabel("all-reduce time per iteration, ms")
        ax.legend(fontsize=7)
        plots.append(("allreduce_vs_bucket.png", fig))

    # Timeline: the backward pass of GPU 0, compute and communication streams and the
    # buckets' windows in the switch, one panel per algorithm (first workload, policy,
    # traffic and bucket size); every kernel of every GPU is in timeline.json.
    first = results[0]
    chosen = [r for r in results if r.workload == first.workload and r.policy == first.policy
              and r.bucket_mb == first.bucket_mb and r.traffic == first.traffic
              and r.timeline.get("gpus")]
    if chosen:
        fig, axes = plt.subplots(len(chosen), 1, figsize=(10, 0.8 + 1.6 * len(chosen)),
                                 squeeze=False)
        for ax, r in zip(axes[:, 0], chosen):
            events = r.timeline["gpus"].get("0", r.timeline["gpus"].get(0, []))
            bwd = [e for e in events if e["tid"] == COMPUTE_TID
                   and e.get("args", {}).get("phase") == "bwd"]
            comm = [e for e in events if e["tid"] == COMM_TID]
            if not bwd:
                continue
            lo = min(e["ts"] for e in bwd) / 1e3
            hi = max([e["ts"] + e["dur"] for e in bwd + comm]) / 1e3
            slowed = [e for e in bwd if "slowdown" in e["args"]]
            plain = [e for e in bwd if "slowdown" not in e["args"]]
            for group, color in ((plain, "#4c72b0"), (slowed, "#8172b3")):
                ax.broken_barh([(e["ts"] / 1e3, e["dur"] / 1e3) for e in group], (2, 0.8),
                               color=color, edgecolor="white", linewidth=0.3)
            ax.broken_barh([(e["ts"] / 1e3, e["dur"] / 1e3) for e in comm], (1, 0.8),
                           color="#dd8452")
            windows = [(e["args"]["switch_ready_us"] / 1e3,
                        (e["args"]["switch_done_us"] - e["args"]["switch_ready_us"]) / 1e3)
                       for e in comm if "switch_ready_us" in e["args"]]
            ax.broken_barh(windows, (0, 0.8), color="#55a868")
            ax.set_xlim(lo, hi + 0.01 * (hi - lo))
            ax.set_yticks([0.4, 1.4, 2.4], ["switch", "comm", "compute"], fontsize=7)
            ax.set_ylabel(r.algo)
        axes[-1, 0].set_xlabel("time, ms (GPU 0's backward pass; compute: blue, slowed by a "
                               "collective: purple; comm: collectives; switch: each bucket "
                               "ready to done in the replay)")
        axes[0, 0].set_title(f"{first.workload}: backward pass of GPU 0, {first.policy} "
                             f"arbitration, {first.traffic} traffic")
        fig.tight_layout()
        plots.append(("timeline.png", fig))
    return plots

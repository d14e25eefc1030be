"""Writing an experiment's ``results/<run>/``: results.json, results.csv, report.md and the
plots, and the terminal summary table (``innet run``, ``innet sweep``). Policies that give
identical results at a point share one row (``rr=prio``), in report.md and on the terminal."""

import csv
import io
import json
from pathlib import Path

from sim.experiment.metrics import rtl_agreement
from sim.files import atomic_writes

__all__ = ["write_results", "summary_table", "merge_policies", "COLUMNS",
           "TERMINAL_COLUMNS"]


#: The table columns (key, heading, format), in report order.
COLUMNS = [
    ("workload", "workload", "{}"), ("bucket_mb", "bucket MiB", "{:g}"),
    ("algo", "algorithm", "{}"), ("policy", "arbiter", "{}"),
    ("backprop_alone_ms", "bwd alone ms", "{:.2f}"), ("backprop_ms", "bwd ms", "{:.2f}"),
    ("backprop_slowdown", "slowdown %", "{:+.1%}"), ("slowdown_sm", "SM %", "{:.1%}"),
    ("slowdown_hbm", "HBM %", "{:.1%}"), ("slowdown_link", "link %", "{:.1%}"),
    ("allreduce_ms", "all-reduce ms", "{:.2f}"), ("exposed_comm_ms", "exposed ms", "{:.2f}"),
    ("iteration_ms", "iteration ms", "{:.2f}"), ("link_utilization", "link util", "{:.2f}"),
]


def _row(point):
    row = {"workload": point.workload, "bucket_mb": point.bucket_mb, "algo": point.algo,
           "policy": point.policy}
    row.update(point.metrics)
    if point.validation:
        row["rtl_window_packets"] = point.validation.get("packets")
        row.update(rtl_agreement(point.validation))
    return row


def _outcome(row):
    """What a point's row says about the model: everything but its policy, wall times and
    the RTL window's check."""
    return {k: v for k, v in row.items()
            if k != "policy" and not k.startswith("rtl_") and not k.endswith("wall_s")}


def merge_policies(rows):
    """``rows`` with the policies that gave identical outcomes at a (workload, bucket,
    algorithm) merged: a list of ``(row, policies)``, in report order. The row is the first
    policy's; ``policies`` a tuple of the policies it stands for."""
    groups, by_point = [], {}
    for row in rows:
        siblings = by_point.setdefault((row["workload"], row["bucket_mb"], row["algo"]), [])
        for group in siblings:
            if _outcome(group[0]) == _outcome(row):
                group[1].append(row["policy"])
                break
        else:
            group = (row, [row["policy"]])
            siblings.append(group)
            groups.append(group)
    return [(row, tuple(policies)) for row, policies in groups]


def _arbiter_label(policies):
    return "=".join(policies)


def _and(items):
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _markdown_table(rows):
    """The per-point table as Markdown, identical policies on one row (``rr=prio``)."""
    head = "| " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = []
    for row, policies in merge_policies(rows):
        row = dict(row, policy=_arbiter_label(policies))
        body.append("| " + " | ".join(fmt.format(row[k]) for k, _, fmt in COLUMNS) + " |")
    return "\n".join([head, rule] + body)


def _pct(x):
    return f"{100 * x:.1f}"


#: The terminal table's columns (key, heading, format, right-aligned), chosen to fit 100
#: columns: the backward time overlapped and the link utilization are in report.md only.
TERMINAL_COLUMNS = [
    ("workload", "workload", str, False), ("bucket_mb", "MiB", "{:g}".format, True),
    ("algo", "algorithm", str, False), ("policy", "arbiter", str, False),
    ("backprop_alone_ms", "bwd ms", "{:.2f}".format, True),
    ("backprop_slowdown", "slow %", lambda x: f"{100 * x:+.1f}", True),
    ("slowdown_sm", "SM %", _pct, True), ("slowdown_hbm", "HBM %", _pct, True),
    ("slowdown_link", "link %", _pct, True), ("allreduce_ms", "AR ms", "{:.2f}".format, True),
    ("exposed_comm_ms", "exp ms", "{:.2f}".format, True),
    ("iteration_ms", "iter ms", "{:.2f}".format, True),
]


def summary_table(results):
    """The per-point summary for the terminal: an aligned plain-text table (two spaces between
    columns, a dashed rule under the headings), identical policies on one row, then a legend.
    At most 100 characters wide for the model zoo's names and up to three merged policies."""
    rows = [_row(r) for r in results]
    merged = merge_policies(rows)
    every = tuple(dict.fromkeys(r["policy"] for r in rows))
    labels = {}
    for _, policies in merged:   # a long merged label would push the table past 100 columns
        long = len(_arbiter_label(policies)) > 9
        labels[policies] = (("all" if policies == every else f"{policies[0]}+{len(policies) - 1}")
                            if long else _arbiter_label(policies))
    cells = [[h for _, h, _, _ in TERMINAL_COLUMNS]]
    for row, policies in merged:
        row = dict(row, policy=labels[policies])
        cells.append([fmt(row[k]) for k, _, fmt, _ in TERMINAL_COLUMNS])
    widths = [max(len(line[i]) for line in cells) for i in range(len(TERMINAL_COLUMNS))]

    def line(values):
        return "  ".join(v.rjust(w) if right else v.ljust(w) for v, w, (*_, right)
                         in zip(values, widths, TERMINAL_COLUMNS)).rstrip()

    lines = [line(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [line(values) for values in cells[1:]]
    lines += [("bwd: backward pass alone; slow: its slowdown overlapped with the all-reduce = "
               "SM + HBM + link;"),
              ("AR: all-reduce time; exp: exposed communication; iter: iteration time "
               "(docs/metrics.md).")]
    for policies in sorted({p for _, p in merged if len(p) > 1}):
        lines.append(f"{labels[policies]}: {_and(policies)} gave identical results at that "
                     "point.")
    return "\n".join(lines)


def write_results(config, results, out_dir, wall_s, command):
    """Write results.json, results.csv, report.md and the plots into ``out_dir`` (all or
    nothing)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [_row(r) for r in results]
    payload = {"config": config.as_dict(), "command": command, "wall_s": wall_s,
               "points": [{**_row(r), "validation": r.validation} for r in results]}
    buf = io.StringIO()
    keys = list(rows[0])
    for row in rows[1:]:
        keys += [k for k in row if k not in keys]
    writer = csv.DictWriter(buf, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    plots = _plots(results)
    names = ["results.json", "results.csv", "report.md"] + [name for name, _ in plots]
    with atomic_writes([out_dir / n for n in names]) as temps:
        temps[0].write_text(json.dumps(payload, indent=2, default=float) + "\n")
        temps[1].write_text(buf.getvalue())
        temps[2].write_text(_report(config, results, wall_s, command, [n for n, _ in plots]))
        for temp, (_, figure) in zip(temps[3:], plots):
            figure.savefig(temp, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt
    for _, figure in plots:
        plt.close(figure)
    return [out_dir / n for n in names]


def _report(config, results, wall_s, command, plot_names):
    lines = [f"# innet run: {config.name}", "",
             f"Command: `{command}` ({wall_s:.1f} s). Configuration: {config.source}; "
             f"{config.gpus} × {config.gpu}, switch {config.gpus} ports × {config.lanes} lanes, "
             f"{config.slots} slots, {config.chunk_flits}-flit chunks. Metric definitions: "
             "docs/metrics.md.", "",
             "## Backprop slowdown and its causes", "",
             _markdown_table([_row(r) for r in results]), ""]
    checked = [r for r in results if r.validation]
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
    lines += ["## Plots", ""] + [f"![{n}]({n})" for n in plot_names] + [""]
    return "\n".join(lines)


def _plots(results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = []
    labels = [f"{r.workload}\n{r.algo}\n{r.policy}" + (f"\n{r.bucket_mb:g} MiB"
                                                      if len({x.bucket_mb for x in results}) > 1
                                                      else "") for r in results]
    fig, ax = plt.subplots(figsize=(max(6, 0.75 * len(results)), 4.5))
    bottom = [0.0] * len(results)
    for key, name, color in (("slowdown_sm", "SM", "#4c72b0"), ("slowdown_hbm", "HBM", "#dd8452"),
                             ("slowdown_link", "link", "#55a868")):
        values = [100 * r.metrics[key] for r in results]
        ax.bar(range(len(results)), values, bottom=bottom, label=name, color=color)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(range(len(results)), labels, fontsize=7)
    ax.set_ylabel("backprop slowdown, %")
    ax.set_title("Backprop slowdown from overlapping the all-reduce, by cause")
    ax.set_ylim(0, max(max(bottom) * 1.15, 0.1))
    ax.legend(loc="upper left")
    fig.tight_layout()
    plots.append(("slowdown.png", fig))

    fig, ax = plt.subplots(figsize=(max(6, 0.75 * len(results)), 4.5))
    ax.bar(range(len(results)), [r.metrics["exposed_comm_ms"] for r in results],
           color="#c44e52", label="exposed communication")
    ax.set_xticks(range(len(results)), labels, fontsize=7)
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

    # Timeline: per GPU, compute vs communication, one panel per algorithm (first workload,
    # first policy, first bucket size).
    first = results[0]
    chosen = [r for r in results if r.workload == first.workload and r.policy == first.policy
              and r.bucket_mb == first.bucket_mb]
    fig, axes = plt.subplots(len(chosen), 1, figsize=(9, 1.2 + 1.3 * len(chosen)),
                             sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], chosen):
        for g, spans in sorted(r.timeline.items(), key=lambda kv: int(kv[0])):
            g = int(g)
            ax.broken_barh(spans["compute"], (g - 0.4, 0.35), color="#4c72b0")
            ax.broken_barh(spans["comm"], (g + 0.05, 0.35), color="#dd8452")
        ax.set_ylabel(f"{r.algo}\nGPU")
        ax.set_yticks([])
    axes[-1, 0].set_xlabel("time, ms (blue: compute kernels; orange: gradient messages in "
                           "the switch)")
    axes[0, 0].set_title(f"{first.workload}: per-GPU timeline, {first.policy} arbitration")
    plots.append(("timeline.png", fig))
    return plots

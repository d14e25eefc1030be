"""The tables of an experiment's results: one row per point (policies that give identical
results share one, ``rr=prio``), as Markdown for report.md and as an aligned table that fits
100 columns for the terminal."""

from sim.experiment.metrics import rtl_agreement

__all__ = ["COLUMNS", "TERMINAL_COLUMNS", "TRAFFIC_COLUMN", "with_traffic", "summary_table",
           "merge_policies", "markdown_table", "point_row", "and_list", "arbiter_label"]


#: The table columns (key, heading, format), in report order.
COLUMNS = [
    ("workload", "workload", "{}"), ("bucket_mb", "bucket MiB", "{:g}"),
    ("algo", "algorithm", "{}"), ("policy", "arbiter", "{}"),
    ("backprop_alone_ms", "bwd alone ms", "{:.2f}"), ("backprop_ms", "bwd ms", "{:.2f}"),
    ("backprop_slowdown", "slowdown %", "{:+.1%}"), ("slowdown_sm", "SM %", "{:.1%}"),
    ("slowdown_hbm", "HBM %", "{:.1%}"), ("slowdown_l2", "L2 %", "{:.1%}"),
    ("slowdown_link", "link %", "{:.1%}"),
    ("allreduce_ms", "all-reduce ms", "{:.2f}"), ("exposed_comm_ms", "exposed ms", "{:.2f}"),
    ("iteration_ms", "iteration ms", "{:.2f}"), ("link_utilization", "link util", "{:.2f}"),
]


def point_row(point):
    row = {"workload": point.workload, "bucket_mb": point.bucket_mb, "algo": point.algo,
           "policy": point.policy, "traffic": getattr(point, "traffic", "dp")}
    row.update(point.metrics)
    v = point.validation or {}
    if "packets" in v:   # rtl: the first bucket window at the run's flit scale
        row["rtl_window_packets"] = v["packets"]
        row.update(rtl_agreement(v))
    full = v.get("full_window")
    if full:             # rtl_windows: the full bucket window at flit scale 1
        row.update({"rtl_full_packets": full["packets"], "rtl_full_cycles": full["rtl_cycles"],
                    "rtl_full_us": full["real_us"],
                    "rtl_full_exact_fraction": rtl_agreement(full)["rtl_exact_fraction"]})
    return row


def _outcome(row):
    """What a point's row says about the model: everything but its policy, wall times and
    the RTL window's check."""
    return {k: v for k, v in row.items()
            if k != "policy" and not k.startswith("rtl_") and not k.endswith("wall_s")}


def merge_policies(rows):
    """``rows`` with the policies that gave identical outcomes at a (workload, bucket,
    algorithm, traffic) merged: a list of ``(row, policies)``, in report order. The row is the first
    policy's; ``policies`` a tuple of the policies it stands for."""
    groups, by_point = [], {}
    for row in rows:
        siblings = by_point.setdefault((row["workload"], row["bucket_mb"], row["algo"],
                                        row.get("traffic", "dp")), [])
        for group in siblings:
            if _outcome(group[0]) == _outcome(row):
                group[1].append(row["policy"])
                break
        else:
            group = (row, [row["policy"]])
            siblings.append(group)
            groups.append(group)
    return [(row, tuple(policies)) for row, policies in groups]


def arbiter_label(policies):
    return "=".join(policies)


def and_list(items):
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def with_traffic(columns, rows):
    """``columns`` with a ``traffic`` column after the algorithm's when some row has traffic
    other than ``dp`` (the default run's table keeps its width)."""
    if all(r.get("traffic", "dp") == "dp" for r in rows):
        return columns
    at = [c[0] for c in columns].index("algo") + 1
    return columns[:at] + [TRAFFIC_COLUMN[:len(columns[0])]] + columns[at:]


#: The traffic column (key, heading, format, right-aligned).
TRAFFIC_COLUMN = ("traffic", "traffic", "{}", False)


def markdown_table(rows):
    """The per-point table as Markdown, identical policies on one row (``rr=prio``)."""
    columns = with_traffic(COLUMNS, rows)
    head = "| " + " | ".join(h for _, h, _ in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = []
    for row, policies in merge_policies(rows):
        row = dict(row, policy=arbiter_label(policies))
        body.append("| " + " | ".join(fmt.format(row[k]) for k, _, fmt in columns) + " |")
    return "\n".join([head, rule] + body)


def _pct(x):
    return f"{100 * x:.1f}"


#: The terminal table's columns (key, heading, format, right-aligned), chosen to fit 100
#: columns with the traffic column: the backward time overlapped and the link utilization are
#: in report.md only, and the units are in the legend, not the headings.
TERMINAL_COLUMNS = [
    ("workload", "workload", str, False), ("bucket_mb", "MiB", "{:g}".format, True),
    ("algo", "algo", str, False), ("policy", "policy", str, False),
    ("backprop_alone_ms", "bwd", "{:.2f}".format, True),
    ("backprop_slowdown", "slow", lambda x: f"{100 * x:+.1f}", True),
    ("slowdown_sm", "SM", _pct, True), ("slowdown_hbm", "HBM", _pct, True),
    ("slowdown_l2", "L2", _pct, True), ("slowdown_link", "link", _pct, True),
    ("allreduce_ms", "AR", "{:.2f}".format, True),
    ("exposed_comm_ms", "exp", "{:.2f}".format, True),
    ("iteration_ms", "iter", "{:.2f}".format, True),
]


def summary_table(results):
    """The per-point summary for the terminal: an aligned plain-text table (two spaces between
    columns, a dashed rule under the headings), identical policies on one row, then a legend.
    At most 100 characters wide for the model zoo's names and up to three merged policies."""
    rows = [point_row(r) for r in results]
    merged = merge_policies(rows)
    every = tuple(dict.fromkeys(r["policy"] for r in rows))
    labels = {}
    for _, policies in merged:   # a long merged label would push the table past 100 columns
        if policies in labels:
            continue
        long = len(arbiter_label(policies)) > 9
        label = (("all" if policies == every else f"{policies[0]}+{len(policies) - 1}")
                 if long else arbiter_label(policies))
        if label in labels.values():   # two groups of as many policies from one first policy
            label = "=".join(p[0] for p in policies)
        labels[policies] = label
    columns = with_traffic(TERMINAL_COLUMNS, rows)
    columns = [(k, h, str if k == "traffic" else fmt, right) for k, h, fmt, right in columns]
    cells = [[h for _, h, _, _ in columns]]
    for row, policies in merged:
        row = dict(row, policy=labels[policies])
        cells.append([fmt(row[k]) for k, _, fmt, _ in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]

    def line(values):
        return "  ".join(v.rjust(w) if right else v.ljust(w) for v, w, (*_, right)
                         in zip(values, widths, columns)).rstrip()

    lines = [line(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [line(values) for values in cells[1:]]
    lines += ["bwd: backward pass alone, ms; slow: its slowdown with the all-reduce overlapped, %;",
              "SM, HBM, L2, link: the slowdown's causes (they add up to it), % points;",
              ("AR: all-reduce time; exp: exposed communication; iter: iteration time; ms "
               "(docs/metrics.md).")]
    for policies in sorted({p for _, p in merged if len(p) > 1}):
        lines.append(f"{labels[policies]}: {and_list(policies)} gave identical results at that "
                     "point.")
    return "\n".join(lines)

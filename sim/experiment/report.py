"""Writing an experiment's ``results/<run>/``: results.json, results.csv, report.md and the
plots, and the terminal summary table (``innet run``, ``innet sweep``).

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
from sim.experiment.metrics import rtl_agreement
from sim.files import atomic_writes

__all__ = ["write_results", "summary_table", "merge_policies", "COLUMNS", "TERMINAL_COLUMNS",
           "GLOSSARY"]


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


#: In-switch reduction "does not pay" where it shortens the iteration by less than this
#: fraction against the better of ring and tree.
NO_GAIN = 0.01
#: An all-reduce is "hidden" where its exposed communication is below this fraction of the
#: iteration.
HIDDEN = 0.01

_ALGO_NAMES = {"ring": "ring", "tree": "tree", "inswitch": "in-switch reduction"}

#: The report's glossary: a short definition per table column, by metric key (the heading is
#: the column's, from COLUMNS). docs/metrics.md has the full definitions.
GLOSSARY = {
    "backprop_alone_ms": "backward pass of one iteration with no collective running "
                         "(GPU model)",
    "backprop_ms": "backward pass overlapped with the all-reduce, link delay included",
    "backprop_slowdown": "bwd ms / bwd alone ms − 1 = SM % + HBM % + link %",
    "slowdown_sm": "backward time lost to SMs that collective kernels hold, as a share of "
                   "bwd alone",
    "slowdown_hbm": "backward time lost to HBM bandwidth that collective kernels take",
    "slowdown_link": "delay that the gradients sharing the switch add to the pipeline-stage "
                     "traffic backprop waits on (largest over GPUs)",
    "allreduce_ms": "time some bucket's all-reduce is under way: the union over buckets of "
                    "[bucket ready to send, last piece or result out] (fast model); time a "
                    "bucket waits at its GPU counts",
    "exposed_comm_ms": "last gradient delivery − end of the backward pass, if positive: "
                       "communication the backward pass did not hide",
    "iteration_ms": "max(end of the backward pass, last gradient delivery) + optimizer step",
    "link_utilization": "egress flits / cycles of the gradient window, mean over ports",
}

#: The full metric definitions, where this module runs from a source tree.
METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _algo(name):
    return _ALGO_NAMES.get(name, name)


def _p(fraction):
    """A fraction as a percentage: ``7.8 %``."""
    return f"{100 * fraction:.1f} %"


def _p_fine(fraction):
    """A small fraction as a percentage, with two decimals under 0.1 %."""
    return f"{100 * fraction:.{1 if abs(fraction) >= 0.001 else 2}f} %"


def _points(fraction, scale):
    """A fraction as percentage points, to one decimal, or two when ``scale`` (the largest
    value it is compared with) is under one point."""
    return f"{100 * fraction:.{1 if scale >= 0.01 else 2}f}"


def _signed(items, words):
    """``items`` (signed fraction, name) as ``"3.1 % and 4.4 % shorter"``, with ``words`` the
    (negative, positive) words; ``"3.1 % shorter than ring, 1.0 % longer than tree"`` when the
    signs differ."""
    word = [words[v >= 0] for v, _ in items]
    if len(set(word)) == 1:
        return _and(_p(abs(v)) for v, _ in items) + " " + word[0]
    return ", ".join(f"{_p(abs(v))} {w} than {n}" for (v, n), w in zip(items, word))


def _better(algos):
    return algos[0] if len(algos) == 1 else f"the better of {_and(algos)}"


def _span(values, fmt):
    """``fmt`` of the one value, or ``low–high``."""
    low, high = min(values), max(values)
    return fmt.format(low) if low == high else f"{fmt.format(low)}–{fmt.format(high)}"


def _policy_text(policy, rcfg):
    """What arbitration ``policy`` does at an egress of the switch ``rcfg``
    (:class:`sim.replay.config.ReplayConfig`)."""
    if policy == "rr":
        return "round-robin over the ingress ports' memory packets and the reduction results"
    if policy == "prio":
        if rcfg.mem_priority == rcfg.result_priority:
            return "strict priority, every class equal (round-robin)"
        memory = (f"memory traffic (priority {rcfg.mem_priority}: point-to-point "
                  "activations, ring and tree messages)")
        results = f"in-switch reduction results (priority {rcfg.result_priority})"
        first, second = ((memory, results) if rcfg.mem_priority > rcfg.result_priority
                         else (results, memory))
        return f"strict priority, {first} before {second}, round-robin within a level"
    if policy == "wrr":
        return ("weighted round-robin over the same requesters; the replay gives each a "
                "weight of one packet, which is round-robin")
    if policy == "drr":
        return f"deficit round-robin over flits, quantum {rcfg.quantum} flits (one chunk)"
    return policy


def _answer(config, rows):
    """The report's opening: what this run's numbers say, as Markdown paragraphs. Every number
    is read from ``rows``; a question the run cannot answer (in-switch reduction with no ring or
    tree to compare, arbitration with one policy) gets no sentence."""
    policies = [p for p in config.policies if any(r["policy"] == p for r in rows)]
    ref = policies[0]
    at = {(r["workload"], r["bucket_mb"], r["algo"]): r for r in rows if r["policy"] == ref}
    workloads = [w for w in config.workloads if any(k[0] == w for k in at)]
    buckets = sorted({k[1] for k in at})
    algos = [a for a in config.algorithms if any(k[2] == a for k in at)]
    baselines = [a for a in algos if a != "inswitch"]
    merged = merge_policies(rows)
    identical = all(len(p) == len(policies) for _, p in merged)
    out = []

    def where(w, b):
        return w + (f" with {b:g} MiB buckets" if len(buckets) > 1 else "")

    # How much backprop slows.
    text = []
    for b in buckets:
        per = []
        for w in workloads:
            rs = [at[(w, b, a)] for a in algos if (w, b, a) in at]
            if rs:
                per.append(f"{w} ({rs[0]['backprop_alone_ms']:.2f} ms alone) by " + _and(
                    f"{_p(r['backprop_slowdown'])} with {_algo(r['algo'])}" for r in rs))
        if not text:
            lead = "overlapping" if len(buckets) > 1 else "Overlapping"
            lead += " the gradient all-reduce with backprop slows the backward pass of "
        else:
            lead = "of "
        if len(buckets) > 1:
            lead = f"With {b:g} MiB buckets, {lead}"
        text.append(lead + "; of ".join(per) + ".")
    under = f" ({ref} arbitration)" if len(policies) > 1 and not identical else ""
    out.append(f"**Slowdown{under}.** " + " ".join(text))

    # Why: the worst point of each workload, split by cause.
    text = []
    names = {"slowdown_sm": "SMs that collective kernels hold",
             "slowdown_hbm": "HBM bandwidth that collective kernels take",
             "slowdown_link": "link delay"}
    for w in workloads:
        rs = [r for k, r in at.items() if k[0] == w]
        worst = max(rs, key=lambda r: r["backprop_slowdown"])
        total = worst["backprop_slowdown"]
        label = worst["algo"] + (f", {worst['bucket_mb']:g} MiB" if len(buckets) > 1 else "")
        if total <= 0:
            text.append(f"{w}'s backward pass is not slowed at any point.")
            continue
        causes = sorted(names, key=lambda k: -worst[k])
        text.append(f"{w}'s largest slowdown ({_p(total)}, {label}) is " + _and(
            f"{_points(worst[k], total)} points of {names[k]} ({100 * worst[k] / total:.0f} %)"
            for k in causes) + ".")
    link_max = max(at.values(), key=lambda r: r["slowdown_link"])
    util = max(r["link_utilization"] for r in at.values())
    if config.p2p_mb == 0:
        text.append("The run has no pipeline-stage traffic (p2p_mb = 0), so the links cannot "
                    "delay backprop.")
    elif link_max["slowdown_link"] == 0:
        text.append(f"Link contention adds nothing at any point: the {config.p2p_mb:g} MiB of "
                    f"pipeline-stage traffic per GPU was never delayed by the gradients (mean "
                    f"link utilization at most {util:.2f}).")
    else:
        text.append(f"Link contention adds at most {100 * link_max['slowdown_link']:.1f} "
                    f"points ({where(link_max['workload'], link_max['bucket_mb'])}, "
                    f"{link_max['algo']}).")
    out.append("**Causes.** " + " ".join(text))

    # What in-switch reduction recovers, and where it does not pay.
    if "inswitch" in algos and baselines:
        text, weak = [], []
        for b in buckets:
            for w in workloads:
                ins = at.get((w, b, "inswitch"))
                bases = [at[(w, b, a)] for a in baselines if (w, b, a) in at]
                if not ins or not bases:
                    continue
                s = (f"For {where(w, b)} it takes the slowdown from " + _and(
                    f"{_p(r['backprop_slowdown'])} ({r['algo']})" for r in bases)
                    + f" to {_p(ins['backprop_slowdown'])}")
                recovered = [(1 - ins["backprop_slowdown"] / r["backprop_slowdown"], r["algo"])
                             for r in bases if r["backprop_slowdown"] > 0]
                removed = [f"{100 * f:.0f} % of {a}'s" for f, a in recovered if f >= 0]
                added = [f"{100 * -f:.0f} % to {a}'s" for f, a in recovered if f < 0]
                s += "".join(f", {verb} {_and(part)}" for verb, part
                             in (("removing", removed), ("adding", added)) if part)
                first = bases[0]
                scale = max(first["backprop_slowdown"], ins["backprop_slowdown"])
                causes = [f"{short} {_points(first[k], scale)} → {_points(ins[k], scale)}"
                          for k, short in (("slowdown_sm", "SM"), ("slowdown_hbm", "HBM"),
                                           ("slowdown_link", "link")) if first[k] or ins[k]]
                if causes:
                    s += f" (against {first['algo']}: {', '.join(causes)} points)"
                s += (f"; its all-reduce takes {ins['allreduce_ms']:.2f} ms against " + _and(
                    f"{r['allreduce_ms']:.2f} ms ({r['algo']})" for r in bases)
                    + f", and the iteration {ins['iteration_ms']:.2f} ms against " + _and(
                    f"{r['iteration_ms']:.2f} ms ({r['algo']})" for r in bases) + ": " + _signed(
                    [(ins["iteration_ms"] / r["iteration_ms"] - 1, r["algo"]) for r in bases],
                    ("shorter", "longer")) + ".")
                text.append(s)
                best = min(bases, key=lambda r: r["iteration_ms"])
                gain = 1 - ins["iteration_ms"] / best["iteration_ms"]
                if gain < NO_GAIN:
                    s = (f"for {where(w, b)} the iteration is "
                         + (f"only {_p_fine(gain)} shorter" if gain >= 0
                            else f"{_p_fine(-gain)} longer")
                         + f" than with {best['algo']} ({best['iteration_ms']:.2f} → "
                         f"{ins['iteration_ms']:.2f} ms)")
                    if best["exposed_comm_ms"] < HIDDEN * best["iteration_ms"]:
                        s += (f": its all-reduce ({best['allreduce_ms']:.2f} ms with "
                              f"{best['algo']}) is hidden behind the "
                              f"{best['backprop_alone_ms']:.2f} ms backward pass anyway, only "
                              f"{best['exposed_comm_ms']:.2f} ms of it exposed")
                    weak.append(s)
        out.append("**In-switch reduction.** " + " ".join(text))
        if weak:
            sentence = "; ".join(weak)
            out.append(f"**Where it does not pay** (iteration under {100 * NO_GAIN:.0f} % "
                       f"shorter than with {_better(baselines)}). "
                       f"{sentence[0].upper()}{sentence[1:]}.")
        else:
            out.append(f"**Where it does not pay.** Nowhere in this run: in-switch reduction "
                       f"shortens every iteration by at least {100 * NO_GAIN:.0f} % against "
                       f"{_better(baselines)}.")
    elif "inswitch" in algos:
        out.append("**In-switch reduction.** The run has no ring or tree point to compare it "
                   "with.")

    # What arbitration changed.
    if len(policies) > 1:
        label = _arbiter_label(policies)
        if identical:
            s = (f"**Arbitration.** It changed nothing: {_and(policies)} give identical "
                 f"results at every point, so the tables show each point once ({label}).")
            if "rr" in policies and "prio" in policies:
                if baselines:
                    s += (f" With {_and(baselines)} every packet is memory traffic, so prio "
                          "has a single priority level, which is round-robin by construction.")
                ins_rows = [r for r in at.values() if r["algo"] == "inswitch"]
                if ins_rows:
                    s += (" With in-switch reduction prio serves memory traffic before "
                          "reduction results, but the two did not compete for an egress enough "
                          "to change any number (mean link utilization at most "
                          f"{max(r['link_utilization'] for r in ins_rows):.2f}).")
        else:
            by = {(r["workload"], r["bucket_mb"], r["algo"], r["policy"]): r for r in rows}
            differing = [k for k in at if len({id(row) for row, p in merged
                                               if (row["workload"], row["bucket_mb"],
                                                   row["algo"]) == k}) > 1]
            pairs = [(at[k], by[k + (p,)]) for k in differing for p in policies[1:]
                     if k + (p,) in by]
            r0, r1 = max(pairs, key=lambda pr: (abs(pr[1]["iteration_ms"]
                                                    - pr[0]["iteration_ms"]),
                                                abs(pr[1]["backprop_slowdown"]
                                                    - pr[0]["backprop_slowdown"])))
            s = (f"**Arbitration.** The policies differ at {len(differing)} of {len(at)} "
                 f"points. The largest difference is {where(r0['workload'], r0['bucket_mb'])}, "
                 f"{r0['algo']}: backprop slowdown {_p(r0['backprop_slowdown'])} ({ref}) "
                 f"against {_p(r1['backprop_slowdown'])} ({r1['policy']}), exposed "
                 f"communication {r0['exposed_comm_ms']:.2f} against "
                 f"{r1['exposed_comm_ms']:.2f} ms, iteration {r0['iteration_ms']:.2f} against "
                 f"{r1['iteration_ms']:.2f} ms.")
            if len(differing) < len(at):
                joined = sorted({_arbiter_label(p) for _, p in merged if len(p) > 1})
                s += (" At the other points they give identical results (one row each in the "
                      f"tables, arbiter {' or '.join(joined)}).")
        out.append(s)

    out.append("**Caveats.** " + " ".join(_caveats(config, rows, ref)))
    return out


def _caveats(config, rows, ref):
    from sim.experiment.config import MiB
    from sim.experiment.point import _replay_config
    from sim.gpu.presets import gpu_preset

    gpu = gpu_preset(config.gpu)
    scales = [r["flit_scale"] for r in rows]
    rcfg = _replay_config(config, ref, gpu, max(scales))
    bucket = min(r["bucket_mb"] for r in rows)
    lag = rcfg.switch.result_latency
    text = [(f"One simulated flit stands for {_span(scales, '{:,}')} real flits and a cycle "
             f"for {_span([r['cycle_ns'] for r in rows], '{:,.0f}')} ns, so a {bucket:g} MiB "
             f"bucket is as few as {bucket * MiB / rcfg.flit_bytes:,.0f} simulated flits per "
             "GPU: bandwidth shares and arbitration order are kept, but contention is resolved "
             "at that grain and the switch's fixed latencies are stretched as much (its "
             f"{lag}-cycle reduction pipeline stands for up to {lag * rcfg.cycle_ns / 1e3:,.1f} "
             "µs)."),
            ("SM and HBM shares come from the GPU model (roofline kernels and a few constants "
             "fitted to published figures, docs/calibration.md), not from measured GPUs; it "
             "leaves out L2 and cache interference between kernels, runs one collective at a "
             "time per GPU and one iteration of identical GPUs, and gives in-switch reduction "
             "the ring's link efficiency, so in-switch gains are an upper bound."),
            (f"Link delay counts only the {config.p2p_mb:g} MiB of pipeline-stage traffic per "
             "GPU that backprop waits on.")]
    windows = [r for r in rows if r.get("rtl_exact_fraction") is not None
               and r.get("rtl_window_packets")]
    if windows:
        exact = sum(r["rtl_exact_fraction"] == 1 for r in windows)
        packets = _span([r["rtl_window_packets"] for r in windows], "{:,}")
        text.append(f"The RTL switch replayed only the first bucket window of each point "
                    f"({packets} packets; {exact} of {len(windows)} windows equal to the model "
                    "delivery for delivery).")
    else:
        text.append("No RTL window ran (rtl = false or --no-rtl): the switch timing is the "
                    "fast model's, which is cycle-exact against the RTL on the stress traces "
                    "of tests/test_cosim.py.")
    return text


def _setup(config, rows):
    """The run's setup as Markdown bullets: GPUs, workloads, precision, buckets, the switch,
    what each policy does, and the time mapping per workload."""
    import inspect

    from sim.experiment.config import MiB
    from sim.experiment.point import _replay_config, rtl_config
    from sim.gpu.iteration import IterationConfig
    from sim.gpu.presets import gpu_preset
    from sim.gpu.workloads import MODELS, build_workload

    gpu = gpu_preset(config.gpu)
    policies = [p for p in config.policies if any(r["policy"] == p for r in rows)]
    rcfg = {p: _replay_config(config, p, gpu, 1) for p in policies}
    first = rcfg[policies[0]]
    spec = first.switch
    loads = []
    sizes = {}
    for w in config.workloads:
        work = build_workload(w)
        sizes[(work.dtype_bytes, work.grad_bytes)] = work
        seq = inspect.signature(MODELS[w]).parameters.get("seq") if w in MODELS else None
        loads.append(f"{w} {work.batch}" + (f" (sequence {seq.default})" if seq else ""))
    width = {2: "FP16/BF16", 4: "FP32"}
    precision = "; ".join(
        f"activations in {a} bytes ({width.get(a, '?')}), gradients all-reduced in {g} bytes "
        f"({width.get(g, '?')})" for a, g in sizes)
    first_bucket = IterationConfig().first_bucket_bytes / MiB
    times = []
    for w in config.workloads:
        rs = [r for r in rows if r["workload"] == w]
        if rs:
            times.append(f"{w} {_span([r['flit_scale'] for r in rs], '{:,}')} "
                         f"({_span([r['cycle_ns'] for r in rs], '{:,.1f}')} ns)")
    lines = [
        (f"- **GPUs**: {config.gpus} × {config.gpu} ({gpu.name}: {gpu.sms} SMs, HBM "
         f"{gpu.hbm_gbps:g} GB/s, NVLink {gpu.link_gbps:g} GB/s per direction; GB = 10^9 "
         "bytes), data parallel."),
        f"- **Workloads**, batch per GPU: {', '.join(loads)}.",
        f"- **Precision**: {precision}; in-switch sums in {first.dtype}.",
        (f"- **Buckets**: {', '.join(f'{b:g}' for b in config.bucket_mb)} MiB (DDP: the "
         f"first bucket {first_bucket:g} MiB); all-reduce by "
         f"{_and(_algo(a) for a in config.algorithms)}; {config.p2p_mb:g} MiB of "
         "pipeline-stage activation gradients per GPU share the links."),
        (f"- **Switch**: {spec.ports} ports × {spec.lanes} lanes ({first.flit_bytes} bytes "
         f"per flit at flit scale 1), {spec.slots} reduction slots, {spec.chunk_flits}-flit "
         f"chunks, memory packets up to {config.mtu_flits} flits, "
         f"{spec.ingress_fifo_flits}-flit ingress FIFOs; every port at the GPU's NVLink "
         "bandwidth."),
    ]
    lines += [f"- **Arbiter `{p}`**: {_policy_text(p, rcfg[p])}." for p in policies]
    lines.append(f"- **Time**: flit scale (real flits per simulated flit) and cycle time per "
                 f"workload: {'; '.join(times)}; the flit scale brings one GPU's gradient link "
                 f"bytes (2 × gradients) per iteration under {config.target_flits:,} simulated "
                 f"flits.")
    if any(r.get("rtl_window_packets") for r in rows):
        shared = [p for p in policies if rtl_config(rcfg[p], config.policies).policy != p]
        lines.append(f"- **RTL**: the first bucket window of every point through the RTL "
                     f"switch ({config.sim})" + (f"; the {_and(shared)} windows on the prio "
                                                 "build with equal priorities" if shared
                                                 else "") + ".")
    else:
        lines.append("- **RTL**: none in this run.")
    return lines


def _glossary():
    headings = {k: h for k, h, _ in COLUMNS}
    lines = [f"- **{headings[k]}** (`{k}`): {text}." for k, text in GLOSSARY.items()]
    lines.append("- **arbiter** `a=b`: policies a and b gave identical results at the point.")
    where = (f"docs/metrics.md of the innet source, here `{METRICS_DOC}`"
             if METRICS_DOC.is_file() else "docs/metrics.md in the innet repository")
    lines += ["", f"Percentages are of the backward pass alone. Full definitions: {where}."]
    return lines


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
    with atomic_writes([out_dir / n for n in names[1:] + names[:1]]) as temps:
        temps[-1].write_text(json.dumps(payload, indent=2, default=float) + "\n")
        temps[0].write_text(buf.getvalue())
        temps[1].write_text(_report(config, results, wall_s, command, [n for n, _ in plots]))
        for temp, (_, figure) in zip(temps[2:-1], plots):
            figure.savefig(temp, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt
    for _, figure in plots:
        plt.close(figure)
    return [out_dir / n for n in names]


def _report(config, results, wall_s, command, plot_names):
    rows = [_row(r) for r in results]
    source = ("the embedded default" if config.source == "<default>"
              else f"`{config.source}`")
    lines = [f"# innet run: {config.name}", "",
             (f"Command: `{command}` ({wall_s:.1f} s); configuration: {source} "
              "(`--print-config` prints it in full). Metrics are defined under "
              "[Metrics](#metrics) below."), ""]
    for paragraph in _answer(config, rows):
        lines += [paragraph, ""]
    lines += ["## Setup", ""] + _setup(config, rows) + [""]
    lines += ["## Backprop slowdown and its causes", "", _markdown_table(rows), ""]
    lines += ["## Metrics", ""] + _glossary() + [""]
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

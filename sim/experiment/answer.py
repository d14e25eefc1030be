"""The words of report.md: the paragraphs that answer the run's question, written from its
numbers (the slowdown per workload and algorithm, its SM / HBM / link causes, what in-switch
reduction recovers and where it does not pay, what arbitration changed, the caveats), the
setup, and the metrics' glossary."""

from pathlib import Path

from sim.experiment.tables import COLUMNS, and_list, arbiter_label, merge_policies

__all__ = ["answer", "setup", "glossary", "traffic_paragraphs", "policy_settings", "GLOSSARY",
           "NO_GAIN", "HIDDEN", "POLICY_EVEN", "TRAFFIC_TEXT"]


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
    "backprop_slowdown": "bwd ms / bwd alone ms − 1 = SM % + HBM % + L2 % + link %",
    "slowdown_sm": "backward time lost to SMs that collective kernels hold, as a share of "
                   "bwd alone",
    "slowdown_hbm": "backward time lost to HBM bandwidth that collective kernels take",
    "slowdown_l2": "backward time lost to L2 pollution: working sets the collective's traffic "
                   "evicts, read from HBM again",
    "slowdown_link": "delay that the gradients sharing the switch add to the messages backprop "
                     "waits on (the critical ones: pipeline-stage traffic, tensor-parallel "
                     "all-reduce, parameter all-gather, offload reads), summed along the "
                     "backward pass, largest over GPUs",
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
        return and_list(_p(abs(v)) for v, _ in items) + " " + word[0]
    return ", ".join(f"{_p(abs(v))} {w} than {n}" for (v, n), w in zip(items, word))


def _better(algos):
    return algos[0] if len(algos) == 1 else f"the better of {and_list(algos)}"


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
        if rcfg.mem_weight == rcfg.result_weight == 1:
            return ("weighted round-robin over the same requesters, each with a weight of one "
                    "packet per turn, which is round-robin")
        def packets(n):
            return f"{n} packet{'s' if n > 1 else ''}"
        return (f"weighted round-robin over the same requesters: up to "
                f"{packets(rcfg.result_weight)} of reduction results per turn at an egress "
                f"against {packets(rcfg.mem_weight)} of each ingress port's memory traffic")
    if policy == "drr":
        chunk = " (one chunk)" if rcfg.quantum == rcfg.chunk_flits else ""
        return (f"deficit round-robin over flits, quantum {rcfg.quantum} flits{chunk}: every "
                "requester the same share of an egress's flits (the switch has one quantum)")
    return policy


def policy_settings(policy, rcfg):
    """``policy`` with the run-time settings that make it what it is, for a sentence:
    ``wrr (results 4 : memory 1)``, ``drr (quantum 64 flits)``, ``prio (memory first)``."""
    if policy == "prio":
        if rcfg.mem_priority == rcfg.result_priority:
            return "prio (equal priorities)"
        return f"prio ({'memory' if rcfg.mem_priority > rcfg.result_priority else 'results'} " \
            "first)"
    if policy == "wrr":
        return f"wrr (results {rcfg.result_weight} : memory {rcfg.mem_weight})"
    if policy == "drr":
        return f"drr (quantum {rcfg.quantum} flits)"
    return policy


def answer(config, rows):
    """The report's opening: what this run's numbers say, as Markdown paragraphs. Every number
    is read from ``rows``; a question the run cannot answer (in-switch reduction with no ring or
    tree to compare, arbitration with one policy) gets no sentence. The paragraphs before the
    caveats read the rows of the run's first traffic configuration; each other one gets a
    paragraph of its own (:func:`traffic_paragraphs`)."""
    traffics = list(dict.fromkeys(r.get("traffic", "dp") for r in rows))
    all_rows = rows
    rows = [r for r in rows if r.get("traffic", "dp") == traffics[0]]
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
                per.append(f"{w} ({rs[0]['backprop_alone_ms']:.2f} ms alone) by " + and_list(
                    f"{_p(r['backprop_slowdown'])} with {_algo(r['algo'])}" for r in rs))
        if not text:
            lead = "overlapping" if len(buckets) > 1 else "Overlapping"
            lead += " the gradient all-reduce with backprop slows the backward pass of "
        else:
            lead = "of "
        if len(buckets) > 1:
            lead = f"With {b:g} MiB buckets, {lead}"
        text.append(lead + "; of ".join(per) + ".")
    notes = ([f"{ref} arbitration"] if len(policies) > 1 and not identical else []) + \
        ([f"{traffics[0]} traffic"] if traffics[0] != "dp" else [])
    under = f" ({', '.join(notes)})" if notes else ""
    out.append(f"**Slowdown{under}.** " + " ".join(text))

    # Why: the worst point of each workload, split by cause.
    text = []
    names = {"slowdown_sm": "SMs that collective kernels hold",
             "slowdown_hbm": "HBM bandwidth that collective kernels take",
             "slowdown_l2": "L2 pollution by the collective's traffic",
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
        text.append(f"{w}'s largest slowdown ({_p(total)}, {label}) is " + and_list(
            f"{_points(worst[k], total)} points of {names[k]} ({100 * worst[k] / total:.0f} %)"
            for k in causes) + ".")
    link_max = max(at.values(), key=lambda r: r["slowdown_link"])
    util = max(r["link_utilization"] for r in at.values())
    dp = traffics[0] == "dp"
    if dp and config.p2p_mb == 0:
        text.append("The run has no pipeline-stage traffic (p2p_mb = 0), so the links cannot "
                    "delay backprop.")
    elif link_max["slowdown_link"] == 0:
        what = (f"the {config.p2p_mb:g} MiB of pipeline-stage traffic per GPU" if dp else
                f"the {traffics[0]} traffic backprop waits on")
        text.append(f"Link contention adds nothing at any point: {what} was never delayed by "
                    f"the gradients (mean link utilization at most {util:.2f}).")
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
                s = (f"For {where(w, b)} it takes the slowdown from " + and_list(
                    f"{_p(r['backprop_slowdown'])} ({r['algo']})" for r in bases)
                    + f" to {_p(ins['backprop_slowdown'])}")
                recovered = [(1 - ins["backprop_slowdown"] / r["backprop_slowdown"], r["algo"])
                             for r in bases if r["backprop_slowdown"] > 0]
                removed = [f"{100 * f:.0f} % of {a}'s" for f, a in recovered if f >= 0]
                added = [f"{100 * -f:.0f} % to {a}'s" for f, a in recovered if f < 0]
                s += "".join(f", {verb} {and_list(part)}" for verb, part
                             in (("removing", removed), ("adding", added)) if part)
                first = bases[0]
                scale = max(first["backprop_slowdown"], ins["backprop_slowdown"])
                causes = [f"{short} {_points(first[k], scale)} → {_points(ins[k], scale)}"
                          for k, short in (("slowdown_sm", "SM"), ("slowdown_hbm", "HBM"),
                                           ("slowdown_l2", "L2"), ("slowdown_link", "link")) if first[k] or ins[k]]
                if causes:
                    s += f" (against {first['algo']}: {', '.join(causes)} points)"
                s += (f"; its all-reduce takes {ins['allreduce_ms']:.2f} ms against " + and_list(
                    f"{r['allreduce_ms']:.2f} ms ({r['algo']})" for r in bases)
                    + f", and the iteration {ins['iteration_ms']:.2f} ms against " + and_list(
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
        size = _size_effect(config, rows, baselines)
        if size:
            out.append(size)
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
        label = arbiter_label(policies)
        if identical:
            s = (f"**Arbitration.** It changed nothing: {and_list(policies)} give identical "
                 f"results at every point, so the tables show each point once ({label}).")
            if "rr" in policies and "prio" in policies:
                if baselines:
                    s += (f" With {and_list(baselines)} every packet is memory traffic, so prio "
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
                joined = sorted({arbiter_label(p) for _, p in merged if len(p) > 1})
                s += (" At the other points they give identical results (one row each in the "
                      f"tables, arbiter {' or '.join(joined)}).")
        out.append(s)

    if len(traffics) > 1 or traffics[0] != "dp":
        out += traffic_paragraphs(config, all_rows)
    # every traffic configuration's RTL windows are counted, not only the first's
    out.append("**Caveats.** " + " ".join(_caveats(config, all_rows, ref)))
    return out


#: What each traffic configuration adds to the gradients (sim/trace/traffic.py).
TRAFFIC_TEXT = {
    "dp": "data parallel with {p2p_mb:g} MiB of pipeline-stage activation gradients per GPU",
    "pp": "two pipeline stages, two micro-batches in flight: forward activations and backward "
          "activation gradients of the boundary layer",
    "tp": "2-way tensor parallelism: an all-reduce of the column-parallel GEMMs' input "
          "gradients inside each layer's backward",
    "fsdp": "FSDP/ZeRO-3: every layer's parameters all-gathered before its forward and "
            "backward kernel",
    "offload": "activation checkpoints offloaded to host memory and read back before their "
               "layer's backward",
}

#: A policy "wins" where it shortens the backward pass by at least this fraction of the
#: backward pass alone against the worst policy; below it the policies are called even.
POLICY_EVEN = 0.001


def _why_identical(algo, policies):
    """Why ``policies`` cannot differ for gradient algorithm ``algo`` in this switch."""
    if algo != "inswitch":
        return (f"with {algo} all-reduce every packet is memory traffic, one priority level (prio is "
                "round-robin there), and the switch has no per-packet class to tell critical "
                "messages from gradients")
    return ("prio serves memory traffic before reduction results, but the two competed for an "
            "egress too rarely to change the backward pass")


def _turns_unlike_priority(groups, label):
    """Where strict priority changes the backward pass and wrr or drr, whatever their
    settings, give round-robin's: one sentence per policy saying why they could not."""
    why = {"wrr": "a weight only lets a requester keep the egress for packets it has ready "
                  "back to back, so it cannot put a waiting critical packet before the results "
                  "as priority does",
           "drr": "the switch's one quantum gives every requester the same share of the "
                  "egress's flits, whatever the class"}
    out = []
    for policy, reason in why.items():
        changed = same = 0
        for rs in groups.values():
            by = {r["policy"]: r["backprop_ms"] for r in rs}
            if {"rr", "prio", policy} <= set(by) and by["prio"] != by["rr"]:
                changed += 1
                same += by[policy] == by["rr"]
        if same:
            where = "every point" if same == changed else f"{same} of the {changed} points"
            out.append(f"{label(policy)} gives round-robin's backward pass at {where} where "
                       f"prio changes it: {reason}.")
    return out


def traffic_paragraphs(config, rows):
    """One paragraph per traffic configuration: the link component it gives backprop, which
    arbitration policy wins where, by how much, and where the policies cannot differ (said
    once, instead of rows that repeat)."""
    from sim.experiment.point import _replay_config
    from sim.gpu.presets import gpu_preset

    gpu = gpu_preset(config.gpu)

    def label(policy):   # the weights and quantum do not depend on the flit scale
        return policy_settings(policy, _replay_config(config, policy, gpu, 1))
    out = []
    traffics = list(dict.fromkeys(r.get("traffic", "dp") for r in rows))
    for t in traffics:
        trs = [r for r in rows if r.get("traffic", "dp") == t]
        what = TRAFFIC_TEXT.get(t, t).format(p2p_mb=config.p2p_mb)
        text = [what[0].upper() + what[1:] + "."]
        groups = {}
        for r in trs:
            groups.setdefault((r["workload"], r["bucket_mb"], r["algo"]), []).append(r)
        several = len({k[1] for k in groups}) > 1
        link = max(trs, key=lambda r: r["slowdown_link"])
        if link["slowdown_link"] > 0:
            text.append(f"Link component of the backprop slowdown up to "
                        f"{_p_fine(link['slowdown_link'])} ({link['workload']}, "
                        + (f"{link['bucket_mb']:g} MiB buckets, " if several else "")
                        + f"{link['algo']}, {link['policy']}); backprop waits "
                        f"{link['critical_wait_alone_ms']:.2f} ms on this traffic even on idle "
                        "links.")
        else:
            text.append("The gradients never delayed the messages backprop waits on: link "
                        "component 0 at every point.")
        same, wins = [], []

        def name(w, b, a):
            return f"{w} {a}" + (f" {b:g} MiB" if several else "")
        for (w, b, a), rs in groups.items():
            if len(rs) < 2:
                continue
            best = min(rs, key=lambda r: r["backprop_ms"])
            worst = max(rs, key=lambda r: r["backprop_ms"])
            gain = (worst["backprop_ms"] - best["backprop_ms"]) / best["backprop_alone_ms"]
            if gain < POLICY_EVEN:
                same.append((w, b, a, [r["policy"] for r in rs]))
                continue
            even = [r["policy"] for r in rs if r["backprop_ms"] == best["backprop_ms"]]
            # Every other policy in order, with how much longer its backward pass is (as a
            # share of the backward pass alone) than the winner's.
            others = {}
            for r in sorted(rs, key=lambda r: r["backprop_ms"]):
                if r["policy"] not in even:
                    others.setdefault(r["backprop_ms"], []).append(r["policy"])
            rest = ", ".join(
                f"{and_list(label(p) for p in ps)} {ms:.2f} ms (+"
                f"{_p_fine((ms - best['backprop_ms']) / best['backprop_alone_ms'])})"
                for ms, ps in others.items())
            wins.append(f"{name(w, b, a)}: {and_list(label(p) for p in even)} "
                        f"win{'s' if len(even) == 1 else ''}, backprop "
                        f"{best['backprop_ms']:.2f} ms against {rest}; {_p_fine(gain)} of the "
                        f"backward pass against {worst['policy']} (link "
                        f"{_p_fine(best['slowdown_link'])} against "
                        f"{_p_fine(worst['slowdown_link'])}; mean link utilization "
                        f"{best['link_utilization']:.2f}; all-reduce {best['allreduce_ms']:.2f} "
                        f"against {worst['allreduce_ms']:.2f} ms)")
        if wins:
            text.append("Arbitration: " + "; ".join(wins) + ".")
            text += _turns_unlike_priority(groups, label)
        # Points where the policies give one backward pass: one sentence per reason.
        reasons = {}
        for w, b, a, ps in same:
            reasons.setdefault((a == "inswitch", tuple(ps)), []).append((w, b, a))
        for (ins, ps), where in reasons.items():
            names = and_list(dict.fromkeys(name(w, b, _algo(a)) for w, b, a in where))
            text.append(f"{and_list(ps)} give the same backward pass (within "
                        f"{100 * POLICY_EVEN:.1f} % of it) at {names}: "
                        f"{_why_identical(where[0][2] if ins else 'ring and tree', ps)}.")
        out.append(f"**Contending traffic: {t}.** " + " ".join(text))
    return out


def crossover_bytes(gpu, n, switch, algo="ring", low=1024, high=1 << 34):
    """The message size above which one all-reduce on ``switch`` (in-switch) is no faster than
    ``algo`` (GPU model, :func:`sim.gpu.collectives.collective_cost`), by bisection; None when
    in-switch is faster at every size up to ``high``, 0 when at none from ``low``."""
    from sim.gpu.collectives import collective_cost

    def wins(size):
        ins = collective_cost(gpu, n, size, "allreduce", "inswitch", switch=switch).time_s
        return ins < collective_cost(gpu, n, size, "allreduce", algo).time_s
    if not wins(low):
        return 0
    if wins(high):
        return None
    while high - low > max(1, low // 1000):
        mid = (low + high) // 2
        low, high = (mid, high) if wins(mid) else (low, mid)
    return high


def _size_effect(config, rows, baselines):
    """The limited all-reduce size effect, as a paragraph: the slot pool's rate against the
    round trip (real size), the size where in-switch stops beating ring, and the run's full
    bucket windows at flit scale 1."""
    from sim.experiment.point import real_switch
    from sim.gpu.in_switch import switch_timing
    from sim.gpu.presets import gpu_preset

    if "ring" not in baselines:
        return ""
    gpu = gpu_preset(config.gpu)
    spec = real_switch(config)
    timing = switch_timing(gpu, spec)
    cross = crossover_bytes(gpu, config.gpus, spec)
    need = timing.bdp_bytes / timing.chunk_bytes
    s = (f"**Where it stops paying off** (the limited all-reduce size effect). The switch's "
         f"{spec.slots} slots × {timing.chunk_bytes} B chunks move at most "
         f"{timing.window_bytes / 1024:,.0f} KiB per slot round trip of "
         f"{timing.round_trip_s * 1e9:,.0f} ns (two 350 ns hops and the switch), "
         f"{timing.rate_gbps:.0f} GB/s of the {timing.line_gbps:.0f} GB/s line; ")
    if cross is None:
        s += "so one in-switch all-reduce beats ring at every size."
    elif cross == 0:
        s += "so one in-switch all-reduce is slower than ring at every size."
    else:
        s += (f"so one in-switch all-reduce beats ring (GPU model, real sizes) only below "
              f"{cross / MiB_:.1f} MiB: below it ring's 2(N−1) dependent steps make it "
              f"latency-bound, above it in-switch streams at its pool's "
              f"{timing.rate_gbps:.0f} GB/s where ring sends 2(N−1)/N of the bytes at line "
              "rate.")
    if timing.slot_limited:
        s += (f" Keeping the reduction at line rate needs the link's bandwidth-delay product, "
              f"{timing.bdp_bytes / 1024:,.0f} KiB per port ({need:,.0f} slots of "
              f"{timing.chunk_bytes} B).")
    windows = {}
    for r in rows:
        if r.get("window_allreduce_us") and r["algo"] in ("ring", "inswitch"):
            windows.setdefault((r["workload"], r["bucket_mb"]), {})[r["algo"]] = r
    for (w, b), by in windows.items():
        if len(by) == 2:
            ring, ins = by["ring"], by["inswitch"]
            s += (f" Replayed at flit scale 1 (the switch's real flits, chunks and slots) by "
                  f"the fast model, {w}'s {ring['window_bucket_mb']:.1f} MiB bucket "
                  f"all-reduces in {ins['window_allreduce_us']:,.0f} µs in-switch against "
                  f"{ring['window_allreduce_us']:,.0f} µs ring (GPU model "
                  f"{ins['window_gpu_model_us']:,.0f} and {ring['window_gpu_model_us']:,.0f} "
                  "µs; the switch replay's ring streams at the raw link rate without NCCL's "
                  "per-step latency and protocol overhead, which the GPU model's ring pays, "
                  "docs/metrics.md \"Full bucket window\").")
            break
    return s


MiB_ = 1 << 20


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
             "GPU that backprop waits on." if tuple(config.traffic) == ("dp",) else
             "Link delay counts only the critical messages of each traffic configuration, "
             "each issued at its undelayed time (a delay is not carried into the next "
             "message's issue), and the switch arbitrates between requesters, not packets: "
             "prio favours every memory packet over reduction results, critical or not.")]
    windows = [r for r in rows if r.get("rtl_exact_fraction") is not None
               and r.get("rtl_window_packets")]
    if windows:
        exact = sum(r["rtl_exact_fraction"] == 1 for r in windows)
        packets = _span([r["rtl_window_packets"] for r in windows], "{:,}")
        text.append(f"The RTL switch replayed only the first bucket window of each point "
                    f"({packets} packets; {exact} of {len(windows)} windows equal to the model "
                    "delivery for delivery).")
    full = [r for r in rows if r.get("rtl_full_packets")]
    if full:
        exact = sum(r["rtl_full_exact_fraction"] == 1 for r in full)
        text.append(f"The RTL switch replayed each point's full bucket window at flit scale 1 "
                    f"({_span([r['rtl_full_packets'] for r in full], '{:,}')} packets over "
                    f"{_span([r['rtl_full_cycles'] for r in full], '{:,}')} cycles, "
                    f"{_span([r['rtl_full_us'] for r in full], '{:,.0f}')} µs real; "
                    f"{exact} of {len(full)} windows equal to the model delivery for "
                    "delivery; table \"RTL full bucket windows\").")
    if not windows and not full:
        text.append("No RTL window ran (rtl = false or --no-rtl): the switch timing is the "
                    "fast model's, which is cycle-exact against the RTL on the stress traces "
                    "of tests/test_cosim.py.")
    return text


def setup(config, rows):
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
         f"{and_list(_algo(a) for a in config.algorithms)}; {config.p2p_mb:g} MiB of "
         "pipeline-stage activation gradients per GPU share the links."),
        (f"- **Switch**: {spec.ports} ports × {spec.lanes} lanes ({first.flit_bytes} bytes "
         f"per flit at flit scale 1), {spec.slots} reduction slots, {spec.chunk_flits}-flit "
         f"chunks, memory packets up to {config.mtu_flits} flits, "
         f"{spec.ingress_fifo_flits}-flit ingress FIFOs; every port at the GPU's NVLink "
         "bandwidth."),
    ]
    if tuple(config.traffic) != ("dp",):
        lines.append("- **Traffic** sharing the links with the gradients, one configuration "
                     "per row group: " + "; ".join(
                         f"`{t}`: " + TRAFFIC_TEXT.get(t, t).format(p2p_mb=config.p2p_mb)
                         for t in config.traffic)
                     + " (docs/metrics.md, \"Contending traffic\").")
    lines += [f"- **Arbiter `{p}`**: {_policy_text(p, rcfg[p])}." for p in policies]
    lines.append(f"- **Time**: flit scale (real flits per simulated flit) and cycle time per "
                 f"workload: {'; '.join(times)}; the flit scale brings one GPU's gradient link "
                 f"bytes (2 × gradients) per iteration under {config.target_flits:,} simulated "
                 f"flits.")
    if any(r.get("rtl_window_packets") for r in rows):
        shared = [p for p in policies if rtl_config(rcfg[p], config.policies).policy != p]
        lines.append(f"- **RTL**: the first bucket window of every point through the RTL "
                     f"switch ({config.sim})" + (f"; the {and_list(shared)} windows on the prio "
                                                 "build with equal priorities" if shared
                                                 else "") + ".")
    if any(r.get("rtl_full_packets") for r in rows):
        lines.append(f"- **RTL full windows**: each point's full bucket window at flit scale 1 "
                     f"through the RTL switch ({config.sim}; `rtl_windows`).")
    elif not any(r.get("rtl_window_packets") for r in rows):
        lines.append("- **RTL**: none in this run.")
    return lines


def glossary():
    headings = {k: h for k, h, _ in COLUMNS}
    lines = [f"- **{headings[k]}** (`{k}`): {text}." for k, text in GLOSSARY.items()]
    lines.append("- **arbiter** `a=b`: policies a and b gave identical results at the point.")
    where = (f"docs/metrics.md of the innet source, here `{METRICS_DOC}`"
             if METRICS_DOC.is_file() else "docs/metrics.md in the innet repository")
    lines += ["", f"Percentages are of the backward pass alone. Full definitions: {where}."]
    return lines

"""report.md and the terminal summary of ``innet run``: the opening paragraphs carry the run's
own numbers (recomputed here from results.json), the setup is stated, the metrics are defined
inside the report, and the terminal table is aligned within 100 columns."""

import contextlib
import io
import itertools
import json
import re
from pathlib import Path

import pytest

from sim.cli.main import main
from sim.experiment.answer import GLOSSARY
from sim.experiment.point import PointResult
from sim.experiment.tables import COLUMNS, TERMINAL_COLUMNS, summary_table
from sim.gpu.workloads import build_workload
from sim.replay.config import ReplayConfig

from .conftest import once_per_session

ROOT = Path(__file__).resolve().parent.parent

#: Heavy pipeline-stage traffic, two bucket sizes and two policies: link delay and, at some
#: points, a difference between rr and prio.
CONTENDED = """
[experiment]
name = "contended"
workloads = ["gpt2_xl"]
gpus = 4
algorithms = ["ring", "inswitch"]
bucket_mb = [25, 100]
policies = ["rr", "prio"]
p2p_mb = 512
traffic = ["dp"]
rtl = false
"""

#: ResNet-50 alone, ring against in-switch: its all-reduce hides behind its backward pass, so
#: in-switch reduction cannot shorten the iteration (the default has no ResNet-50).
HIDDEN = """
[experiment]
name = "hidden"
workloads = ["resnet50"]
algorithms = ["ring", "inswitch"]
policies = ["rr"]
traffic = ["dp"]
rtl = false
"""

ALGO = {"ring": "ring", "tree": "tree", "inswitch": "in-switch reduction"}
KEY = ("workload", "bucket_mb", "algo")


def _run(tmp_path_factory, name, args, config=None):
    """``innet run`` once per test session (the workers share it: ``once_per_session``)."""
    def make(tmp):
        if config is not None:
            (tmp / "c.toml").write_text(config)
            args.insert(0, str(tmp / "c.toml"))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["run", *args, "-o", str(tmp / "out"), "--name", "r", "--quiet"]) == 0
        run = tmp / "out" / "r"
        payload = json.loads((run / "results.json").read_text())
        return {"terminal": out.getvalue(), "report": (run / "report.md").read_text(),
                "config": payload["config"], "points": payload["points"], "dir": str(run)}

    result = once_per_session(tmp_path_factory, f"report-{name}", make)
    result["dir"] = Path(result["dir"])
    return result


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    return _run(tmp_path_factory, "default", ["--no-rtl"])


@pytest.fixture(scope="module")
def contended_run(tmp_path_factory):
    return _run(tmp_path_factory, "contended", [], CONTENDED)


@pytest.fixture(scope="module")
def hidden_run(tmp_path_factory):
    return _run(tmp_path_factory, "hidden", [], HIDDEN)


@pytest.fixture(params=["default", "contended"])
def run(request):
    return request.getfixturevalue(f"{request.param}_run")


def pct(fraction):
    return f"{100 * fraction:.1f} %"


def paragraph(report, name):
    """The opening paragraph that starts with ``**name``."""
    found = [p for p in report.split("\n\n") if p.startswith(f"**{name}")]
    assert len(found) == 1, (name, report[:3000])
    return found[0]


def traffic_points(run, traffic=None):
    """The points of one traffic configuration, by default the run's first: the report's
    opening paragraphs read those; each other configuration has a paragraph of its own."""
    traffic = traffic or run["config"]["traffic"][0]
    return [p for p in run["points"] if p["traffic"] == traffic]


def reference(run, traffic=None):
    """The first policy's rows of one traffic configuration (the first by default), by
    (workload, bucket, algorithm)."""
    ref = run["config"]["policies"][0]
    return {tuple(p[k] for k in KEY): p for p in traffic_points(run, traffic)
            if p["policy"] == ref}


def outcome(point):
    return {k: v for k, v in point.items() if k not in ("policy", "validation")
            and not k.startswith("rtl_") and not k.endswith("wall_s")}


def identical_everywhere(points):
    """Per (workload, bucket, algorithm, traffic): whether every policy gave one outcome."""
    groups = {}
    for p in points:
        groups.setdefault(tuple(p[k] for k in KEY + ("traffic",)), []).append(outcome(p))
    return {key: all(o == outcomes[0] for o in outcomes) for key, outcomes in groups.items()}


def test_the_report_opens_with_the_answer(run):
    report = run["report"]
    assert report.index("**Slowdown") < report.index("**Causes") < report.index("**Caveats")
    assert report.index("**Caveats") < report.index("## Setup") < report.index("| workload |")


def test_slowdown_paragraph_has_every_points_slowdown(run):
    text = paragraph(run["report"], "Slowdown")
    for p in reference(run).values():
        assert f"{p['workload']} ({p['backprop_alone_ms']:.2f} ms alone)" in text
        assert f"{pct(p['backprop_slowdown'])} with {ALGO[p['algo']]}" in text
    for bucket in {p["bucket_mb"] for p in run["points"]}:
        if len(run["config"]["bucket_mb"]) > 1:
            assert f"With {bucket:g} MiB buckets" in text


def test_causes_paragraph_splits_the_worst_slowdown(run):
    text = paragraph(run["report"], "Causes")
    rows = reference(run).values()
    for workload in run["config"]["workloads"]:
        worst = max((p for p in rows if p["workload"] == workload),
                    key=lambda p: p["backprop_slowdown"])
        total = worst["backprop_slowdown"]
        assert f"{workload}'s largest slowdown ({pct(total)}, {worst['algo']}" in text
        for key in ("slowdown_sm", "slowdown_hbm", "slowdown_l2", "slowdown_link"):
            if worst[key]:
                assert f"({100 * worst[key] / total:.0f} %)" in text
    link = max(p["slowdown_link"] for p in rows)
    if link == 0:
        assert "Link contention adds nothing at any point" in text
        assert f"at most {max(p['link_utilization'] for p in rows):.2f}" in text
    else:
        assert f"Link contention adds at most {100 * link:.1f} points" in text


def test_inswitch_paragraph_compares_with_ring_and_tree(run):
    text = paragraph(run["report"], "In-switch reduction")
    at = reference(run)
    baselines = [a for a in run["config"]["algorithms"] if a != "inswitch"]
    for (w, b, a), ins in at.items():
        if a != "inswitch":
            continue
        assert f"to {pct(ins['backprop_slowdown'])}" in text
        assert f"its all-reduce takes {ins['allreduce_ms']:.2f} ms" in text
        assert f"the iteration {ins['iteration_ms']:.2f} ms" in text
        for base in baselines:
            r = at[(w, b, base)]
            assert f"{pct(r['backprop_slowdown'])} ({base})" in text
            assert f"{r['allreduce_ms']:.2f} ms ({base})" in text
            assert f"{r['iteration_ms']:.2f} ms ({base})" in text
            removed = 1 - ins["backprop_slowdown"] / r["backprop_slowdown"]
            assert f"{100 * abs(removed):.0f} % {'of' if removed >= 0 else 'to'} {base}'s" in text
            assert pct(abs(ins["iteration_ms"] / r["iteration_ms"] - 1)) in text


def test_where_inswitch_does_not_pay(run):
    text = paragraph(run["report"], "Where it does not pay")
    at = reference(run)
    baselines = [a for a in run["config"]["algorithms"] if a != "inswitch"]
    weak = {}
    for (w, b, a), ins in at.items():
        if a == "inswitch":
            best = min((at[(w, b, x)] for x in baselines), key=lambda r: r["iteration_ms"])
            gain = 1 - ins["iteration_ms"] / best["iteration_ms"]
            weak.setdefault(w, []).append(gain if gain < 0.01 else None)
    for w, gains in weak.items():
        for gain in filter(lambda g: g is not None, gains):
            fine = f"{100 * abs(gain):.{1 if abs(gain) >= 0.001 else 2}f} %"
            assert w in text and fine in text
        if all(g is None for g in gains):
            assert w not in text
    if all(g is None for gains in weak.values() for g in gains):
        assert "Nowhere in this run" in text


def test_run_names_the_hidden_all_reduce(hidden_run, default_run):
    """ResNet-50's all-reduce hides behind its backward pass (exposed under 1 % of the
    iteration): the report says so with the exposed time; BERT-large's in-switch gain in the
    default run is over the threshold, so the default names no workload there."""
    text = paragraph(hidden_run["report"], "Where it does not pay")
    at = reference(hidden_run)
    ring, ins = at[("resnet50", 25.0, "ring")], at[("resnet50", 25.0, "inswitch")]
    assert ring["exposed_comm_ms"] < 0.01 * ring["iteration_ms"]
    assert 1 - ins["iteration_ms"] / ring["iteration_ms"] < 0.01
    assert "resnet50" in text and "hidden behind" in text
    assert f"only {ring['exposed_comm_ms']:.2f} ms of it exposed" in text
    assert f"({ring['allreduce_ms']:.2f} ms with ring)" in text
    default = reference(default_run)
    for (w, b, a), ins in default.items():
        if a == "inswitch":
            best = min(default[(w, b, x)]["iteration_ms"] for x in ("ring", "tree"))
            assert 1 - ins["iteration_ms"] / best >= 0.01
    assert "Nowhere in this run" in paragraph(default_run["report"], "Where it does not pay")


def test_arbitration_paragraph(run):
    """The Arbitration paragraph speaks of the first traffic configuration's points; the table
    has one row per point and policy group, over every traffic configuration."""
    text = paragraph(run["report"], "Arbitration")
    same = identical_everywhere(traffic_points(run))
    policies = run["config"]["policies"]
    label = "=".join(policies)
    if all(same.values()):
        assert "identical results at every point" in text
        assert run["report"].count("identical results at every point") == 1
    else:
        differing = [k for k, v in same.items() if not v]
        assert f"The policies differ at {len(differing)} of {len(same)} points" in text
    table = [line for line in run["report"].splitlines() if line.startswith("| ")][1:]
    every = identical_everywhere(run["points"])
    assert len(table) == sum(1 if v else len(policies) for v in every.values())
    assert sum(f"| {label} |" in line for line in table) == sum(every.values())


def test_caveats_give_the_flit_scale_and_what_is_left_out(run):
    text = paragraph(run["report"], "Caveats")
    scales = [p["flit_scale"] for p in traffic_points(run)]
    cycles = [p["cycle_ns"] for p in traffic_points(run)]
    assert f"{min(scales):,}" in text and f"{max(scales):,}" in text
    assert f"{min(cycles):,.0f}" in text and f"{max(cycles):,.0f}" in text
    link = (f"{run['config']['p2p_mb']:g} MiB of pipeline-stage traffic"
            if run["config"]["traffic"] == ["dp"] else
            "the critical messages of each traffic configuration")
    for words in ("L2", "one collective at a time", "upper bound", link, "No RTL window ran"):
        assert words in text


def test_setup_lines(run):
    report, c = run["report"], run["config"]
    setup = report[report.index("## Setup"):report.index("## Backprop slowdown")]
    lines = {line.split("**")[1]: line for line in setup.splitlines() if line.startswith("- **")}
    assert lines["GPUs"].startswith(f"- **GPUs**: {c['gpus']} × {c['gpu']} (")
    for w in c["workloads"]:
        assert f"{w} {build_workload(w).batch}" in lines["Workloads"]
    work = build_workload(c["workloads"][0])
    assert f"activations in {work.dtype_bytes} bytes" in lines["Precision"]
    assert f"gradients all-reduced in {work.grad_bytes} bytes (FP32)" in lines["Precision"]
    assert ", ".join(f"{b:g}" for b in c["bucket_mb"]) + " MiB" in lines["Buckets"]
    switch = lines["Switch"]
    for words in (f"{c['gpus']} ports × {c['lanes']} lanes", f"{c['slots']} reduction slots",
                  f"{c['chunk_flits']}-flit chunks", f"up to {c['mtu_flits']} flits"):
        assert words in switch
    prio = lines["Arbiter `prio`"]
    assert f"memory traffic (priority {ReplayConfig().mem_priority}" in prio
    assert f"before in-switch reduction results (priority {ReplayConfig().result_priority})" \
        in prio
    assert "round-robin" in lines["Arbiter `rr`"]
    for p in run["points"]:
        assert f"{p['workload']} {p['flit_scale']:,} ({p['cycle_ns']:,.1f} ns)" in lines["Time"]
    assert lines["RTL"] == "- **RTL**: none in this run."


def test_metrics_are_defined_in_the_report_and_its_links_resolve(run):
    report = run["report"]
    metrics = report[report.index("## Metrics"):]
    for key, heading, _ in COLUMNS[4:]:
        assert f"- **{heading}** (`{key}`): " in metrics
    doc = (ROOT / "docs" / "metrics.md").read_text()
    for key in GLOSSARY:
        assert f"`{key}`" in doc, f"{key}: not in docs/metrics.md"
    anchors = {"#" + h[3:].strip().lower().replace(" ", "-")
               for h in report.splitlines() if h.startswith("## ")}
    for target in re.findall(r"\]\(([^)]+)\)", report):
        assert target in anchors or (run["dir"] / target).is_file(), target


def _table(terminal):
    lines = terminal.split("\n\n")[0].splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line) <= {"-", " "})
    spans = [m.span() for m in re.finditer(r"-+", lines[rule])]
    rows = lines[rule + 1:]
    rows = rows[:next((i for i, r in enumerate(rows) if ":" in r), len(rows))]
    return lines, lines[rule - 1], spans, rows


def _check_aligned(terminal, traffic):
    """The table's cells by column key; ``traffic``: whether it must have the traffic column
    (after the algorithm's), which it has when some point's traffic is not ``dp``."""
    lines, head, spans, rows = _table(terminal)
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    columns = list(TERMINAL_COLUMNS)
    if traffic:
        columns.insert(3, ("traffic", "traffic", str, False))
    assert [head[a:b].strip() for a, b in spans] == [c[1] for c in columns], head
    for row in [head] + rows:
        assert len(row) == spans[-1][1], row
        cells = [row[a:b] for a, b in spans]
        gaps = [row[b:a] for (_, b), (a, _) in itertools.pairwise(spans)]
        assert all(g == "  " for g in gaps), row
        assert all(cell.strip() for cell in cells), row
        for cell, (_, _, _, right) in zip(cells, columns):
            assert cell[-1] != " " if right else cell[0] != " ", (cell, row)
    return [{c[0]: row[a:b].strip() for c, (a, b) in zip(columns, spans)} for row in rows]


def test_terminal_table_is_aligned_within_100_columns(run):
    traffic = run["config"]["traffic"] != ["dp"]
    cells = _check_aligned(run["terminal"], traffic)
    same = identical_everywhere(run["points"])
    policies = run["config"]["policies"]
    assert len(cells) == sum(1 if v else len(policies) for v in same.values())
    checked = 0
    for row in cells:
        at = reference(run, row["traffic"] if traffic else None)
        key = (row["workload"], float(row["bucket_mb"]), row["algo"])
        if row["policy"] in ("=".join(policies), policies[0]):
            assert row["backprop_slowdown"] == f"{100 * at[key]['backprop_slowdown']:+.1f}"
            assert row["slowdown_link"] == f"{100 * at[key]['slowdown_link']:.1f}"
            assert row["iteration_ms"] == f"{at[key]['iteration_ms']:.2f}"
            checked += 1
    assert checked == len(same)


def _points(run, policies, differ=()):
    """PointResults of ``run``'s first-policy rows (every traffic configuration) under
    ``policies``; the ``differ`` policies get a different iteration time."""
    out = []
    ref = run["config"]["policies"][0]
    for p in run["points"]:
        if p["policy"] != ref:
            continue
        metrics = {k: v for k, v in p.items()
                   if k not in KEY + ("policy", "validation", "traffic")}
        for policy in policies:
            changed = dict(metrics, iteration_ms=metrics["iteration_ms"] + 1) \
                if policy in differ else metrics
            out.append(PointResult(p["workload"], p["bucket_mb"], p["algo"], policy, changed,
                                   traffic=p["traffic"]))
    return out


@pytest.mark.parametrize("differ, labels", [((), {"all"}), (("drr",), {"rr+2", "drr"}),
                                             (("wrr", "drr"), {"rr=prio", "wrr=drr"})])
def test_terminal_table_with_four_policies_fits(default_run, differ, labels):
    """Merged policies keep the table within 100 columns: "all", or the first policy and how
    many more ("rr+2") when the full label would be too long; the legend spells them out."""
    text = summary_table(_points(default_run, ("rr", "prio", "wrr", "drr"), differ))
    cells = _check_aligned(text, default_run["config"]["traffic"] != ["dp"])
    assert {row["policy"] for row in cells} == labels
    for label in labels - {"drr"}:
        assert any(line.startswith(f"{label}: ") for line in text.splitlines()), text


def test_caveats_count_the_rtl_windows_of_every_traffic_configuration(default_run):
    """The default run has two traffic configurations; the caveat on the RTL full windows
    counts the windows of both, not only the first's (the rows are the default run's, given
    hand-made RTL window fields: every fifth window inexact)."""
    from sim.experiment.answer import answer
    from sim.experiment.config import load_config

    rows = [dict(p, rtl_full_packets=1000 + i, rtl_full_cycles=5000 + i, rtl_full_us=1.0,
                 rtl_full_exact_fraction=0.5 if i % 5 == 0 else 1.0)
            for i, p in enumerate(default_run["points"])]
    assert len({r["traffic"] for r in rows}) > 1
    text = [p for p in answer(load_config(), rows) if p.startswith("**Caveats")][0]
    exact = sum(i % 5 != 0 for i in range(len(rows)))
    assert f"{exact} of {len(rows)} windows equal to the model" in text
    assert f"1,000–{999 + len(rows):,} packets" in text


@pytest.mark.parametrize("differ", [(), ("prio",)])
def test_slowdown_plot_draws_identical_policies_once(default_run, differ):
    """A bar per point and outcome, as in the table: rr and prio that gave one outcome share a
    bar labelled rr=prio; where they differ, each has its own."""
    from sim.experiment import report
    points = _points(default_run, ("rr", "prio"), differ)
    plots = dict(report._plots(points))
    ticks = [t.get_text().split("\n")[2] for t in plots["slowdown.png"].axes[0].get_xticklabels()]
    want = ["rr", "prio"] * (len(points) // 2) if differ else ["rr=prio"] * (len(points) // 2)
    assert ticks == want

"""``innet bench equiv``: the lock-step comparison of this tree's switch with another's.

The golden is the other switch: a copy of this tree's ``hw/`` must agree in every cycle, and
copies with one deliberate change — one that alters only flow control, one that alters only
the data of a truncated packet's tail — must be caught, at a cycle and signal the report names.
"""

import json
import shutil
import subprocess

import pytest

from sim.bench.equiv import REPO_ROOT, bench_equiv, hw_this, load_reference, lockstep

SIZES = {"ports": 3, "lanes": 2, "slots": 4, "chunk_flits": 3, "jobs": 4}


def _copy_of_hw(tmp_path, edit=None):
    """A copy of this tree's hw/ under tmp_path, with one textual ``edit`` (file, old, new)."""
    target = tmp_path / "hw"
    shutil.copytree(REPO_ROOT / "hw", target, ignore=shutil.ignore_patterns("__pycache__"))
    if edit:
        name, old, new = edit
        text = (target / name).read_text()
        assert text.count(old) == 1, f"the mutation's anchor is gone from hw/{name}: {old!r}"
        (target / name).write_text(text.replace(old, new))
    return tmp_path


@pytest.mark.parametrize("egress, seed", [("random", 4), ("ready", 7)])
def test_a_copy_of_this_switch_agrees_and_the_traffic_reaches_every_path(tmp_path, egress,
                                                                         seed):
    ref, _ = load_reference(_copy_of_hw(tmp_path))
    run = lockstep(hw_this(), ref, cycles=800, seed=seed, egress=egress, **SIZES)
    assert run["agree"], run["mismatch"]
    assert run["cycles"] == 800
    t = run["traffic"]
    assert run["reductions"] > 0 and run["flits_out"] > 0
    assert t["faulty_contributions"] > 0 and t["truncated_by_sender"] > 0
    assert t["memory_packets"] > 0 and t["dropped_kinds"] > 0 and t["job_writes"] > 0


MUTATIONS = {
    # the egress stage takes a flit only while both its registers are free
    "flow control": ("regslice.py", "self.i.ready.eq(~(full[0] & full[1]))",
                     "self.i.ready.eq(~(full[0] | full[1]))"),
    # a truncated packet's NULLIFIED tail keeps its data instead of zeros
    "tail data": ("switch.py", "lanes_out.append(Mux(offers_tail, 0, flit.data[j]))",
                  "lanes_out.append(flit.data[j])"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_one_line_change_is_caught_with_its_cycle_and_signal(tmp_path, mutation):
    ref, _ = load_reference(_copy_of_hw(tmp_path, MUTATIONS[mutation]))
    run = lockstep(hw_this(), ref, cycles=3000, seed=2, **SIZES)
    assert not run["agree"]
    d = run["mismatch"]
    assert 0 <= d["cycle"] < 3000 and run["cycles"] == d["cycle"]
    assert d["this"] != d["reference"]
    if mutation == "flow control":   # the first sign is a flit presented a cycle apart
        assert d["signal"].startswith(("o.valid", "o.payload", "i.ready"))
    else:                            # only a tail's data can differ
        assert d["signal"].startswith("o.payload")


def test_bench_stops_at_the_first_seed_that_differs(tmp_path):
    r = bench_equiv(_copy_of_hw(tmp_path, MUTATIONS["flow control"]), cycles=3000, seeds=3,
                    **SIZES)
    assert not r["agree"] and len(r["runs"]) == 1 and r["runs"][0]["mismatch"]


def _innet(*argv):
    return subprocess.run(["python", "-m", "sim.cli", *argv], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False)


def test_cli_against_a_git_revision_reports_it():
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    out = _innet("bench", "equiv", "--against", "HEAD", "--cycles", "60", "--seeds", "1",
                 "--ports", "2", "--json")
    assert out.returncode in (0, 1), out.stderr   # 1 only if hw/ has uncommitted changes
    report = json.loads(out.stdout)
    assert report["reference"] == head[:12] and report["runs"][0]["cycles"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--against", "no-such-revision"], "neither a directory holding hw/ nor a git revision"),
    (["--against", "HEAD", "--jobs", "1"], "--jobs must be at least 2"),
    (["--against", "HEAD", "--cycles", "5"], "--cycles must be at least 10"),
])
def test_cli_bad_input_is_one_line_and_exit_2(argv, message):
    out = _innet("bench", "equiv", *argv)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stdout == ""

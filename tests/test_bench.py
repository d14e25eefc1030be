"""``innet bench arbiter``: the saturation figures it reports are the RTL's behaviour;
``innet bench cosim``: every replay it times agrees."""

import json
import subprocess
import sys

import pytest

from hw.spec import Policy
from sim.bench.arbiter import bench_arbiter, jain
from sim.cli.main import main

from .conftest import require_simulator


def test_jain_index():
    assert jain([5, 5, 5, 5]) == 1.0
    assert jain([1, 0, 0, 0]) == 0.25


def test_saturation_is_one_flit_per_cycle_with_fair_shares():
    result = bench_arbiter(ports=4, cycles=600, max_flits=6)
    by_policy = {r["policy"]: r for r in result["results"]}
    for r in by_policy.values():
        assert r["flits_per_cycle"] == 1.0
    packets = by_policy["rr"]["packets_per_port"]
    assert max(packets) - min(packets) <= 1
    assert by_policy["prio"]["fairness"]["value"] == 1.0   # the top priority takes the link
    flits = by_policy["drr"]["flits_per_port"]
    assert max(flits) - min(flits) <= 2 * 6   # within a quantum plus a packet mid-turn
    wrr = by_policy["wrr"]
    weights = wrr["fairness"]["weights"]
    rounds = min(p // w for p, w in zip(wrr["packets_per_port"], weights))
    assert all(abs(p - rounds * w) <= w for p, w in zip(wrr["packets_per_port"], weights))


def test_bench_cli_json():
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "bench", "arbiter", "--ports", "3",
                           "--cycles", "200", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [r["policy"] for r in result["results"]] == list(Policy.names())
    assert result["command"].startswith("innet bench arbiter")


@pytest.mark.slow
def test_bench_cosim_quick(capsys):
    """`innet bench cosim --quick`: the RTL (player and per-cycle driver), the C core and the
    Python model replay the same trace; every delivery agrees among all four, and the harness
    replaying the player's schedule with no Python in the loop writes the same log."""
    require_simulator("verilator")
    assert main(["bench", "cosim", "--quick", "--skip-run", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["packets"] > 1000
    for agreement in (r["agreement"], r["per_cycle_driver"]["agreement_with_player"],
                      r["python_model"]["agreement_with_core"]):
        assert agreement["missing"] == 0
        assert agreement["exact"] == agreement["deliveries"] > 1000
    assert r["no_python_log_equal"] and r["no_python_cycles_per_s"] > 0
    assert r["model_wall_s"] > 0 and r["python_model"]["wall_s"] > 0
    assert "run_wall_s" not in r
    # Python wakes per event the closed loop needs, not per packet (each wake-up counted once)
    assert set(r["cosim_wakeups"]) == {"delivery", "idle", "time"}
    assert 0 < sum(r["cosim_wakeups"].values()) < r["packets"]

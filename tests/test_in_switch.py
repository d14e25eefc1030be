"""The two in-switch collectives and NCCL's tuning model, against hand-derived formulas, the
RTL's measured figures (docs/hw.md, ``innet bench reduce``) and NCCL's constants; and the
command line that shows them (``model collective --algo nvls|inswitch``, ``model curve``,
``model overlap --comm OP:SIZE``)."""

import json

import pytest

from hw.spec import SwitchSpec
from sim.gpu.collectives import allreduce_cost, collective_cost, collective_curve
from sim.gpu.in_switch import (
    NVLS_EFFICIENCY,
    default_switch,
    make_switch,
    switch_timing,
)
from sim.gpu.nccl_tuning import channels_for
from sim.gpu.presets import ModelInputError, gpu_preset

H100, A100 = gpu_preset("h100"), gpu_preset("a100")
GiB, MiB = 1 << 30, 1 << 20


@pytest.fixture
def run(capsys):
    """``innet ARGS`` in this process: (exit status, stdout, stderr)."""
    from sim.cli.main import main

    def invoke(*args):
        status = main(list(args))
        out, err = capsys.readouterr()
        return status or 0, out, err
    return invoke


# -- innet's switch ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtypes, ports, cycles", [
    (("int32",), 2, 22), (("int32",), 4, 25), (("int32",), 8, 30), (("int32",), 16, 39),
    (("fp32", "int32", "bf16"), 2, 28), (("fp32", "int32", "bf16"), 8, 48)])
def test_pipeline_is_the_rtls_measured_latency(dtypes, ports, cycles):
    """docs/hw.md, `innet bench reduce [--dtype ...] --quick`: first contribution flit in to
    first result flit out, 8-flit chunks, every member's first flit in the same cycle (the
    member judged last waits ports - 1 cycles for the judge, after the hold FIFO's write
    register and registered read); a unit with fp adders has seven stages per tree level
    (`bench_line_rate(ports=2 or 8, lanes=1, slots=64, chunk_flits=8, chunks=4,
    dtypes=("fp32", "int32", "bf16"))`: 22 and
    42 cycles with the one-step pick, one more with the two-step pick, one more again with the
    buffered hold FIFO, two more with the registered bank read, one more with the hold FIFO's
    write register, one more with the landing registered beside the slot table: 28 and 48).
    (16 ports: `bench_line_rate(ports=16, lanes=1, slots=64, chunk_flits=8, chunks=16)`, 39
    cycles.) In the switch the result then passes the egress
    arbiter's registered choice, the link register and the egress stage: 3 cycles more
    (tests/test_cosim.py, test_model_single_packet_latency, against the RTL)."""
    spec = SwitchSpec(ports=ports, lanes=8, slots=64, chunk_flits=8, dtypes=dtypes)
    assert switch_timing(H100, spec).pipeline_cycles == cycles + 3


def test_slot_pool_against_the_rtl_closed_loop():
    """With no wire between GPU and switch, the round trip is the pipeline plus the result
    chunk; 2 slots of 8 flits cover 16 of the reduction unit's 38 cycles: the RTL unit
    measured 0.4236 flit/cycle (8 ports, `bench_line_rate(ports=8, lanes=8, slots=2,
    chunk_flits=8, chunks=192)`; 0.4350 before the landing was registered beside the slot
    table, 0.4470 before the hold FIFO's write register, 0.4732 before the registered bank
    read, 0.4875 before the hold FIFO's registered read). The switch's
    egress (the arbiter's registered choice, the link register and the egress stage) adds 3
    cycles to that round trip."""
    wireless = H100.with_(link_latency_s=0.0)
    two = switch_timing(wireless, SwitchSpec(ports=8, lanes=8, slots=2, chunk_flits=8,
                                             dtypes=("int32",)))
    assert two.rate_gbps / two.line_gbps == pytest.approx(16 / (16 / 0.4236 + 3), rel=0.01)
    four = switch_timing(wireless, SwitchSpec(ports=8, lanes=8, slots=4, chunk_flits=8,
                                              dtypes=("int32",)))
    assert four.rate_gbps / four.line_gbps == pytest.approx(32 / (16 / 0.4236 + 3), rel=0.01)


@pytest.mark.parametrize("slots", [16, 64, 256, 1024])
def test_bandwidth_delay_product_limits_inswitch(slots):
    """rate = min(line, slots × chunk / round trip), round trip = 2 hops + (pipeline + chunk)
    cycles, a cycle one 32-byte flit at the GPU's effective link rate (the int32 unit's
    30-cycle pipeline at 8 ports, the hold FIFO's write register and read, the judge's wait,
    the landing registered, the two-step pick and the registered bank read included, and the
    3 cycles of the egress arbiter's registered choice, the link register and the egress
    stage)."""
    spec = SwitchSpec(ports=8, lanes=8, slots=slots, chunk_flits=8, dtypes=("int32",))
    line = 18 * 20.6e9                       # H100: 18 NVLinks × NCCL's 20.6 GB/s
    cycle = 32 / line
    rtt = 2 * 350e-9 + (30 + 3 + 8) * cycle
    rate = min(line, slots * 8 * 32 / rtt)
    cost = allreduce_cost(H100, 8, GiB, "inswitch", switch=spec)
    assert cost.link_rate_gbps * 1e9 == pytest.approx(rate)
    assert cost.time_s == pytest.approx(8.4e-6 + rtt + GiB / rate)
    assert cost.switch["slot_limited"] == (slots * 8 * 32 < line * rtt)


def test_smaller_slot_pools_are_slower_and_the_spec_changes_the_time():
    times = [allreduce_cost(H100, 8, GiB, "inswitch", switch=make_switch(8, s)).time_s
             for s in (16, 64, 256)]
    assert times[0] > times[1] > times[2]
    base = make_switch(8, 64, 8, 8)
    for other in (make_switch(8, 64, 16, 8), make_switch(8, 64, 8, 4), make_switch(16, 64)):
        assert allreduce_cost(H100, 8, GiB, "inswitch", switch=other).time_s != \
            allreduce_cost(H100, 8, GiB, "inswitch", switch=base).time_s


def test_default_switch_covers_the_round_trip_with_the_fewest_slots():
    for gpu in (A100, H100, gpu_preset("v100")):
        spec = default_switch(gpu, 8)
        assert not switch_timing(gpu, spec).slot_limited
        assert switch_timing(gpu, make_switch(8, spec.slots // 2)).slot_limited
        assert spec.ports == 8 and spec.lanes == 8 and spec.chunk_flits == 8


def test_inswitch_traffic_and_gpu_resources():
    cost = allreduce_cost(A100, 8, 64 * MiB, "inswitch")
    assert cost.sent_bytes == cost.received_bytes == 64 * MiB
    assert cost.hbm_bytes == 2 * 64 * MiB and cost.sms == A100.nvls_channels
    assert cost.protocol == "innet"
    with pytest.raises(ModelInputError, match="ports must be at least the GPU count 8"):
        allreduce_cost(A100, 8, MiB, "inswitch", switch=make_switch(4, 64))


# -- NVLink SHARP -------------------------------------------------------------------------------

def test_nvls_traffic_latency_and_rate():
    n, size = 8, GiB
    cost = allreduce_cost(H100, n, size, "nvls")
    moved = size * (n + 1) / n               # S out + S/n out, S/n in + S in
    assert cost.link_bytes == cost.sent_bytes == cost.received_bytes == pytest.approx(moved)
    assert cost.hbm_bytes == 2 * size and cost.sms == 16 and cost.protocol == "Simple"
    assert cost.time_s == pytest.approx(25e-6 + moved / (18 * 20.6e9 * NVLS_EFFICIENCY))
    rs = collective_cost(H100, n, size, "reducescatter", "nvls")
    assert rs.sent_bytes == size and rs.received_bytes == pytest.approx(size / n)
    ag = collective_cost(H100, n, size, "allgather", "nvls")
    assert ag.sent_bytes == pytest.approx(size / n) and ag.received_bytes == size


def test_nvls_only_where_nvswitch_reduces():
    for name in ("a100", "v100", "a100-80"):
        with pytest.raises(ModelInputError, match="needs NVLink SHARP"):
            allreduce_cost(gpu_preset(name), 8, MiB, "nvls")
    for op in ("reduce", "broadcast", "p2p"):
        with pytest.raises(ModelInputError, match="runs allreduce, reducescatter, allgather"):
            collective_cost(H100, 8, MiB, op, "nvls")


# -- NCCL's tuning model -------------------------------------------------------------------------

def test_latency_is_nccls_base_plus_steps():
    """An empty all-reduce costs NCCL's latency: LL on a ring, 6.6 + 2(n−1) × 0.6 us."""
    for n in (2, 8, 16):
        cost = allreduce_cost(A100, n, 0)
        assert cost.protocol == "LL"
        assert cost.time_s == pytest.approx((6.6 + 2 * (n - 1) * 0.6) * 1e-6)


def test_small_messages_use_fewer_channels():
    # Simple: 512 threads × 64 bytes per channel before NCCL adds another
    assert channels_for(100 * 1024, 24, "Simple", "ring", 8) == 4
    assert channels_for(MiB, 24, "Simple", "ring", 8) == 24
    assert allreduce_cost(A100, 8, 16 * 1024).sms < allreduce_cost(A100, 8, 256 * MiB).sms == 24


def test_curve_rises_to_its_peak():
    costs = collective_curve(H100, 8, "ring")
    assert [c.size_bytes for c in costs] == [1 << k for k in range(10, 33)]
    busbw = [c.busbw_gbps for c in costs]
    assert busbw[-1] == max(busbw) and busbw[0] < busbw[-1] / 100
    assert costs[0].protocol == "LL" and costs[-1].protocol == "Simple"


# -- the command line ----------------------------------------------------------------------------

def test_cli_nvls_and_inswitch_keep_the_json_keys(run):
    status, out, err = run("model", "collective", "--gpu", "h100", "--gpus", "8", "--algo",
                           "nvls", "--size", "1GiB", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert {"busbw_GBps", "algbw_GBps", "time_us"} <= set(data)
    status, out, err = run("model", "collective", "--gpu", "h100", "--algo", "inswitch",
                           "--slots", "64", "--json")
    assert status == 0, err
    assert json.loads(out)["switch"]["slots"] == 64 and json.loads(out)["switch"]["slot_limited"]


@pytest.mark.parametrize("args, message", [
    (["model", "collective", "--gpu", "a100", "--algo", "nvls"], "needs NVLink SHARP"),
    (["model", "collective", "--algo", "ring", "--slots", "8"],
     "--slots applies to --algo inswitch only"),
    (["model", "collective", "--algo", "inswitch", "--slots", "70000"], "Slot count"),
    (["model", "overlap", "--gpu", "h100", "--algo", "nvls", "--comm", "reduce:1MiB"],
     "runs allreduce, reducescatter, allgather only"),
    (["model", "curve", "--plot", "x.svg"], "expected a .png file"),
    (["trace", "gen", "--gpu", "h100", "--algo", "nvls", "-o", "never.bin"],
     "--algo nvls has no trace form"),
    (["model", "curve", "--gpu", "a100", "--max-size", "64GiB"], "--max-size must be at most"),
])
def test_cli_refuses_in_one_line(run, args, message):
    status, out, err = run(*args)
    assert status == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_curve_table_json_and_plot(run, tmp_path):
    plot = tmp_path / "curve.png"
    status, out, err = run("model", "curve", "--gpu", "h100", "--gpus", "8", "--algo", "nvls",
                           "--max-size", "64MiB", "--json", "--plot", str(plot))
    assert status == 0, err
    data = json.loads(out)
    assert [r["size_bytes"] for r in data["rows"]] == [1 << k for k in range(10, 27)]
    assert all({"time_us", "algbw_GBps", "busbw_GBps", "protocol"} <= set(r)
               for r in data["rows"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("op", ["allreduce", "allgather", "reducescatter", "broadcast",
                                "reduce"])
def test_cli_overlap_takes_every_collective(run, op):
    status, out, err = run("model", "overlap", "--gpu", "a100", "--compute",
                           "gemm:2048,2048,2048", "--comm", f"{op}:16MiB", "--json")
    assert status == 0, err
    assert json.loads(out)["comm_alone_s"] > 0

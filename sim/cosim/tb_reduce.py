"""cocotb testbench for the exported reduction unit (``innet export reduce``).

Parameters from the environment: INNET_PORTS, INNET_LANES, INNET_SLOTS, INNET_CHUNK,
INNET_SEED. Three jobs (int32 saturating, fp32, bf16) with different member sets send chunks
closed-loop (a slot is reused only after its result came back) with random idle on every
ingress and random backpressure on every egress; every result is checked against the numpy
golden model, and the drop counters must stay zero.
"""

import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from hw.packet import DType, Header, Kind, Packet, USER_LAYOUT, decode
from hw.reduce import ERROR_CAUSES
from sim.cosim.axis import AxisSink, AxisSource
from sim.cosim.pins import start_clock
from sim.model.reduce import reduce_words

PORTS = int(os.environ.get("INNET_PORTS", "4"))
LANES = int(os.environ.get("INNET_LANES", "2"))
SLOTS = int(os.environ.get("INNET_SLOTS", "4"))
CHUNK = int(os.environ.get("INNET_CHUNK", "2"))
SEED = int(os.environ.get("INNET_SEED", "1"))


def words(rng, dtype):
    shape = (CHUNK, LANES)
    if dtype == DType.INT32:
        return rng.integers(-(1 << 31), 1 << 31, size=shape, dtype=np.int64).astype(np.uint32)
    if dtype == DType.FP32:
        return rng.standard_normal(shape).astype(np.float32).view(np.uint32)
    h = (rng.standard_normal(shape + (2,)).astype(np.float32).view(np.uint32) >> 16)
    return (h[..., 0] | (h[..., 1] << 16)).astype(np.uint32)


@cocotb.test()
@cocotb.parametrize(noise=[False, True])
async def test_reduce(dut, noise):
    rng = np.random.default_rng(SEED + int(noise))
    prng = random.Random(SEED + int(noise))
    start_clock(dut)
    sources = [AxisSource(dut, f"s{k}_axis", prng, 0.3 if noise else 0.0) for k in range(PORTS)]
    sinks = [AxisSink(dut, f"m{k}_axis", prng, 0.3 if noise else 0.0) for k in range(PORTS)]
    dut.rst.value = 1
    for s in sources:
        s.tvalid.value = 0
    for s in sinks:
        s.tready.value = 0
    dut.cfg_valid.value = 0
    dut.cfg_clear.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0

    everyone = list(range(PORTS))
    jobs = {1: (everyone, DType.INT32, True), 2: (everyone[::2], DType.FP32, False),
            3: (everyone[1:], DType.BF16, False)}
    # Slots split between jobs (each job owns its range); chunk c of a job reuses its slot
    # after chunk c - share.
    share = max(1, SLOTS // len(jobs))
    for index, (job, (members, dtype, sat)) in enumerate(jobs.items()):
        dut.cfg_valid.value = 1
        dut.cfg_job.value = job
        dut.cfg_enable.value = 1
        dut.cfg_members.value = sum(1 << k for k in members)
        dut.cfg_dtype.value = dtype.value
        dut.cfg_saturate.value = int(sat)
        dut.cfg_slot_base.value = (index * share) % SLOTS
        dut.cfg_slot_count.value = share if SLOTS >= len(jobs) else 0
        await RisingEdge(dut.clk)
    dut.cfg_valid.value = 0

    chunks, queues = {}, {k: [] for k in everyone}
    for index, (job, (members, dtype, sat)) in enumerate(jobs.items()):
        for seq in range(3 * share):
            slot = index * share + seq % share
            contribs = {k: words(rng, dtype) for k in members}
            chunks[(job, seq)] = (members, dtype, sat, contribs)
            gate = (job, seq - share) if seq >= share else None
            for k in members:
                header = Header(kind=Kind.REDUCE_CONTRIB, src=k, dst=0, job=job, slot=slot,
                                seq=seq, dtype=dtype)
                queues[k].append((Packet(header, contribs[k]), gate))
    for k in everyone:   # interleave jobs on each port, keeping each job's order
        by_job = {}
        for item in queues[k]:
            by_job.setdefault(item[0].header.job, []).append(item)
        order = [j for j, lst in by_job.items() for _ in lst]
        prng.shuffle(order)
        queues[k] = [by_job[j].pop(0) for j in order]

    received = [set() for _ in everyone]
    results = [dict() for _ in everyone]
    current = [[] for _ in everyone]
    pending = [0] * PORTS
    expected_results = sum(len(m) for (m, _, _, _) in chunks.values())
    got = 0
    for cycle in range(200_000):
        await RisingEdge(dut.clk)
        for k, src in enumerate(sources):
            # release the next packet once its gate (a result on this port) has arrived
            if src.done and pending[k] < len(queues[k]):
                packet, gate = queues[k][pending[k]]
                if gate is None or gate in received[k]:
                    src.send(packet)
                    pending[k] += 1
            src.drive()
        for sink in sinks:
            sink.drive()
        await ReadOnly()
        for src in sources:
            src.sample()
        for k, sink in enumerate(sinks):
            before = len(sink.beats)
            sink.sample()
            for beat in sink.beats[before:]:
                current[k].append(beat)
                if beat[4]:
                    user = decode(USER_LAYOUT, beat[1])
                    key = (user["job"], user["seq"])
                    assert key not in results[k], f"egress {k}: result {key} twice"
                    assert beat[2] == k, f"egress {k}: result addressed to {beat[2]}"
                    assert user["kind"] == Kind.REDUCE_RESULT
                    results[k][key] = [b[0] for b in current[k]]
                    received[k].add(key)
                    current[k] = []
                    got += 1
        if got == expected_results:
            break
    assert got == expected_results, f"{got} of {expected_results} results after {cycle} cycles"

    for (job, seq), (members, dtype, sat, contribs) in chunks.items():
        want, _ = reduce_words(contribs, members, dtype, sat)
        for k in everyone:
            if k not in members:
                assert (job, seq) not in results[k], f"non-member {k} got {(job, seq)}"
                continue
            flits = results[k][(job, seq)]
            got_words = np.array([[(f >> (32 * lane)) & 0xFFFFFFFF for lane in range(LANES)]
                                  for f in flits], dtype=np.uint32)
            np.testing.assert_array_equal(got_words, want, err_msg=f"job {job} chunk {seq} "
                                                                    f"egress {k}")
    await RisingEdge(dut.clk)
    for cause in ERROR_CAUSES:
        assert int(getattr(dut, f"err_{cause}").value) == 0, f"drop counter {cause}"

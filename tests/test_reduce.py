"""The reduction unit in the Amaranth simulator against the numpy golden model."""

import numpy as np
import pytest

from hw.fpadd import BF16, FP32
from hw.packet import DType, Kind
from hw.reduce import ReductionUnit
from hw.spec import SwitchSpec
from sim.model.reduce import reduce_words

from .reduce_harness import contribution, random_words, run_unit


def _unit(ports, lanes, slots, chunk_flits, jobs=16):
    """A reduction unit of that size with every element type."""
    return ReductionUnit(SwitchSpec(ports=ports, lanes=lanes, slots=slots,
                                    chunk_flits=chunk_flits, jobs=jobs))


def check_results(packets, chunks, ports):
    """chunks: {(job, seq): (slot, members, dtype, sat, {port: words})}"""
    for (job, seq), (slot, members, dtype, sat, contribs) in chunks.items():
        want, _ = reduce_words(contribs, members, dtype, sat)
        for k in range(ports):
            got = [p for p in packets[k] if p.header.job == job and p.header.seq == seq]
            if k not in members:
                assert not got, f"non-member {k} got a result for job {job} chunk {seq}"
                continue
            assert len(got) == 1, f"egress {k}: {len(got)} results for job {job} chunk {seq}"
            pkt = got[0]
            assert pkt.header.kind == Kind.REDUCE_RESULT and pkt.header.slot == slot
            assert pkt.header.dst == k and pkt.header.dtype == dtype
            np.testing.assert_array_equal(np.array(pkt.flits, dtype=np.uint32), want,
                                          err_msg=f"job {job} chunk {seq} egress {k}")


@pytest.mark.parametrize("dtype", [DType.INT32, DType.FP32, DType.BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("ports", [2, 3, 4])
def test_one_job_all_ports(dtype, ports):
    rng = np.random.default_rng(ports)
    P, L, S = 3, 2, 4
    unit = _unit(ports, L, S, P)
    members = list(range(ports))
    chunks, traffic = {}, {k: [] for k in range(ports)}
    for seq in range(6):
        slot = seq % S
        contribs = {k: random_words(rng, dtype, (P, L)) for k in members}
        chunks[(1, seq)] = (slot, members, dtype, False, contribs)
        for k in members:
            traffic[k].append(contribution(k, 1, slot, seq, contribs[k], dtype))
    # outstanding chunks per job must not exceed the slots: send in windows of S
    traffic = {k: v[:S] for k, v in traffic.items()}
    chunks = {key: v for key, v in chunks.items() if key[1] < S}
    packets, res = run_unit(unit, {1: (members, dtype, False)}, traffic, seed=ports,
                            idle=0.3, stall=0.3)
    check_results(packets, chunks, ports)
    assert all(v == 0 for v in res["errors"].values()), res["errors"]
    assert res["reductions"] == len(chunks)


def make_job_traffic(rng, job, members, dtype, chunks_n, slot_base, slots, P, L, sat=False,
                     scale=None):
    """Closed-loop traffic for one job: chunk c uses slot base + c mod slots and waits for the
    result of chunk c - slots."""
    chunks, traffic = {}, {}
    for seq in range(chunks_n):
        slot = slot_base + seq % slots
        contribs = {k: (random_words(rng, dtype, (P, L)) if scale is None else scale(rng))
                    for k in members}
        chunks[(job, seq)] = (slot, members, dtype, sat, contribs)
        gate = (job, seq - slots) if seq >= slots else None
        for k in members:
            traffic.setdefault(k, []).append(
                (contribution(k, job, slot, seq, contribs[k], dtype), gate))
    return chunks, traffic


def merge(*parts):
    chunks, traffic = {}, {}
    for c, t in parts:
        chunks.update(c)
        for k, items in t.items():
            traffic.setdefault(k, []).extend(items)
    return chunks, traffic


def interleave(rng, traffic):
    """Shuffle each port's packets across jobs while keeping each job's order."""
    out = {}
    for k, items in traffic.items():
        by_job = {}
        for item in items:
            by_job.setdefault(item[0].header.job, []).append(item)
        order = [job for job, lst in by_job.items() for _ in lst]
        rng.shuffle(order)
        out[k] = [by_job[job].pop(0) for job in order]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_concurrent_jobs_closed_loop(seed):
    """Several jobs with different group sizes, memberships and element types share the
    ports and the slot pool; more chunks than slots, so slots are reused on results."""
    rng = np.random.default_rng(seed)
    N, P, L = 5, 2, 2
    unit = _unit(N, L, 6, P)
    jobs = {1: ([0, 1, 2, 3, 4], DType.FP32, False), 2: ([1, 3], DType.INT32, False),
            3: ([0, 2, 4], DType.BF16, False)}
    chunks, traffic = merge(
        make_job_traffic(rng, 1, jobs[1][0], DType.FP32, 6, 0, 2, P, L),
        make_job_traffic(rng, 2, jobs[2][0], DType.INT32, 5, 2, 2, P, L),
        make_job_traffic(rng, 3, jobs[3][0], DType.BF16, 5, 4, 2, P, L))
    traffic = interleave(rng, traffic)
    packets, res = run_unit(unit, jobs, traffic, seed=seed, idle=0.4, stall=0.4,
                            max_cycles=40000)
    check_results(packets, chunks, N)
    assert all(v == 0 for v in res["errors"].values()), res["errors"]
    assert res["reductions"] == len(chunks)


def test_results_do_not_depend_on_arrival_order():
    """The same fp32/bf16 chunks arriving with different skews and orders give bit-identical
    results (and equal the member-order golden)."""
    rng = np.random.default_rng(7)
    N, P, L = 4, 2, 2
    members = [0, 1, 2, 3]
    # values spanning magnitudes, so that addition order matters in floating point
    def scale(r):
        spread = 10.0 ** r.integers(-6, 7, (P, L))
        return (r.standard_normal((P, L)) * spread).astype(np.float32).view(np.uint32)
    chunks, traffic = make_job_traffic(rng, 1, members, DType.FP32, 4, 0, 4, P, L, scale=scale)
    runs = []
    for seed in range(4):
        order = np.random.default_rng(100 + seed)
        shuffled = {}
        for k, items in traffic.items():
            items = list(items)
            order.shuffle(items)   # each port sends its chunks in another order
            shuffled[k] = items
        packets, _ = run_unit(_unit(N, L, 4, P), {1: (members, DType.FP32, False)},
                              shuffled, seed=seed, idle=0.6)
        check_results(packets, chunks, N)
        runs.append({(p.header.seq, k): p.flits for k in range(N) for p in packets[k]})
    assert all(run == runs[0] for run in runs[1:])
    # the values are such that the order of additions matters: some left-to-right order of
    # the members differs from the tree in at least one element
    import itertools
    differs = False
    for (_, _), (_, _, _, _, c) in chunks.items():
        tree = reduce_words(c, members, DType.FP32)[0]
        for order in itertools.permutations(members):
            acc = np.zeros((P, L), dtype=np.float32)
            for k in order:
                acc = (acc + c[k].view(np.float32)).astype(np.float32)
            differs |= bool((acc.view(np.uint32) != tree).any())
    assert differs


def test_int32_wrap_and_saturate():
    N, P, L = 3, 1, 2
    big = np.array([[0x7FFFFFF0, 0x80000005]], dtype=np.uint32)   # near +max, near -min
    contribs = {k: big for k in range(N)}
    jobs = {1: ([0, 1, 2], DType.INT32, False), 2: ([0, 1, 2], DType.INT32, True)}
    traffic = {k: [contribution(k, 1, 0, 0, big, DType.INT32),
                   contribution(k, 2, 1, 0, big, DType.INT32)] for k in range(N)}
    packets, res = run_unit(_unit(N, L, 2, P, jobs=4), jobs, traffic)
    check_results(packets, {(1, 0): (0, [0, 1, 2], DType.INT32, False, contribs),
                            (2, 0): (1, [0, 1, 2], DType.INT32, True, contribs)}, N)
    sat = [p for p in packets[0] if p.header.job == 2][0].flits[0]
    assert sat == (0x7FFFFFFF, 0x80000000)
    assert res["overflow"] == 0b100   # job 2 only, sticky


def test_bad_packets_are_dropped_and_counted_without_disturbing_others():
    rng = np.random.default_rng(3)
    N, P, L, S = 4, 2, 1, 4
    members = [0, 1, 2]
    good_chunks, good = make_job_traffic(rng, 1, members, DType.INT32, 3, 0, 3, P, L)
    w = lambda: random_words(rng, DType.INT32, (P, L))  # noqa: E731
    bad = {
        "bad_kind": contribution(0, 1, 0, 0, w(), DType.INT32, kind=Kind.MEM_WRITE),
        "bad_source": contribution(1, 1, 0, 0, w(), DType.INT32, src=2),
        "unknown_job": contribution(2, 9, 0, 0, w(), DType.INT32),
        "slot_range": contribution(0, 1, 7, 0, w(), DType.INT32),
        "not_member": contribution(3, 1, 0, 0, w(), DType.INT32),
        "wrong_dtype": contribution(0, 1, 0, 0, w(), DType.FP32),
        "slot_conflict": contribution(1, 1, 0, 5, w(), DType.INT32),   # slot 0 holds chunk 0
        "bad_length": contribution(2, 1, 1, 1, random_words(rng, DType.INT32, (P + 1, L)),
                                   DType.INT32),
    }
    traffic = {k: list(v) for k, v in good.items()}
    # each bad packet goes first on its port, while chunk 0 is being gathered
    traffic[0] = [traffic[0][0], bad["bad_kind"], bad["slot_range"], bad["wrong_dtype"]] + \
        traffic[0][1:]
    traffic[1] = [traffic[1][0], bad["bad_source"], bad["slot_conflict"]] + traffic[1][1:]
    traffic[2] = [bad["unknown_job"], bad["bad_length"]] + traffic[2]
    traffic[3] = [bad["not_member"]]
    duplicate = (contribution(0, 1, 0, 0, w(), DType.INT32), None)
    traffic[0].insert(1, duplicate)   # chunk 0 again from member 0
    packets, res = run_unit(_unit(N, L, S, P), {1: (members, DType.INT32, False)},
                            traffic)
    check_results(packets, good_chunks, N)
    expected = {cause: 1 for cause in bad}
    expected["duplicate"] = 1
    assert {c: n for c, n in res["errors"].items() if n} == expected


def test_job_cannot_touch_another_jobs_slots():
    """Tenant isolation: job 2 (slots 2-3) aims contributions at job 1's slots 0-1, before and
    while job 1 gathers there. Each is dropped as foreign_slot without claiming or touching a
    slot, and both jobs' results stay exact."""
    rng = np.random.default_rng(11)
    N, P, L, S = 4, 2, 1, 4
    chunks1, traffic1 = make_job_traffic(rng, 1, [0, 1], DType.INT32, 4, 0, 2, P, L)
    chunks2, traffic2 = make_job_traffic(rng, 2, [2, 3], DType.FP32, 4, 2, 2, P, L)
    w = lambda: random_words(rng, DType.FP32, (P, L))  # noqa: E731
    raid = [contribution(2, 2, 0, 0, w(), DType.FP32), contribution(3, 2, 1, 1, w(), DType.FP32),
            contribution(2, 2, 1, 0, w(), DType.FP32)]
    traffic = {0: traffic1[0], 1: traffic1[1],
               2: [raid[0], raid[2]] + traffic2[2], 3: [raid[1]] + traffic2[3]}
    packets, res = run_unit(_unit(N, L, S, P),
                            {1: ([0, 1], DType.INT32, False, 0, 2),
                             2: ([2, 3], DType.FP32, False, 2, 2)}, traffic)
    check_results(packets, {**chunks1, **chunks2}, N)
    assert {c: n for c, n in res["errors"].items() if n} == {"foreign_slot": 3}


def test_membership_changes_between_chunks():
    """A job's group grows from {0,1} to {0,1,2,3} and shrinks to {2}: chunks claimed before a
    change keep the members they were claimed with; the other job is undisturbed."""
    rng = np.random.default_rng(5)
    N, P, L = 4, 1, 1
    unit = _unit(N, L, 4, P)
    words = lambda: random_words(rng, DType.INT32, (P, L))  # noqa: E731
    c0 = {k: words() for k in (0, 1)}
    c1 = {k: words() for k in (0, 1, 2, 3)}
    c2 = {2: words()}
    other = {k: words() for k in (1, 3)}
    traffic = {0: [contribution(0, 1, 0, 0, c0[0], DType.INT32)],
               1: [contribution(1, 1, 0, 0, c0[1], DType.INT32),
                   contribution(1, 2, 3, 0, other[1], DType.INT32)],
               2: [], 3: [contribution(3, 2, 3, 0, other[3], DType.INT32)]}
    packets, _ = run_unit(unit, {1: ([0, 1], DType.INT32, False),
                                 2: ([1, 3], DType.INT32, False)}, traffic)
    check_results(packets, {(1, 0): (0, [0, 1], DType.INT32, False, c0),
                            (2, 0): (3, [1, 3], DType.INT32, False, other)}, N)
    # grow, then shrink, on the same unit: run again with reconfiguration in between
    unit = _unit(N, L, 4, P)
    traffic = {k: [(contribution(k, 1, 1, 1, c1[k], DType.INT32), None)] for k in range(4)}
    traffic[2].append((contribution(2, 1, 2, 2, c2[2], DType.INT32), (1, 1)))
    packets, _ = run_unit(unit, {1: ([0, 1, 2, 3], DType.INT32, False)}, traffic,
                          reconfigure={3: {1: ([2], DType.INT32, False)}})
    check_results(packets, {(1, 1): (1, [0, 1, 2, 3], DType.INT32, False, c1),
                            (1, 2): (2, [2], DType.INT32, False, c2)}, N)


_FP32_SPECIAL = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x3F800000, 0xBF800001,
                 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800005,
                 0xFFC00123, 0x00800000, 0x33800000, 0x40400000]


@pytest.mark.parametrize("dtype", [DType.INT32, DType.FP32, DType.BF16], ids=lambda d: d.name)
def test_absent_members_are_the_identity(dtype):
    """A slot reused by a smaller group: the absent members' banks still hold the earlier
    chunk's words, and the tree must take the identity in their place (0, or −0 in fp32 and
    each bf16 half), so a single member's chunk comes back as its own words, bit for bit —
    −0 and +0, subnormals, infinities — with every NaN the canonical one."""
    N, P, L = 4, 2, 8
    rng = np.random.default_rng(11)
    unit = _unit(N, L, 2, P)
    if dtype == DType.INT32:
        mine = random_words(rng, dtype, (P, L))
        want = mine
    else:
        if dtype == DType.FP32:
            mine = np.array(_FP32_SPECIAL, np.uint32).reshape(P, L)
        else:   # bf16: the fp32 values' top halves, in both halves of a lane, one reversed
            top = np.array(_FP32_SPECIAL, np.uint32) >> 16
            mine = (top | (top[::-1] << 16)).reshape(P, L)
        fmt = FP32 if dtype == DType.FP32 else BF16
        want = np.zeros_like(mine)
        for shift in range(0, 32, fmt.width):
            x = (mine >> shift) & ((1 << fmt.width) - 1)
            is_nan = (((x >> fmt.frac_bits) & fmt.exp_max) == fmt.exp_max) & \
                ((x & ((1 << fmt.frac_bits) - 1)) != 0)
            want |= np.where(is_nan, fmt.canonical_nan, x).astype(np.uint32) << shift
    before = {k: random_words(rng, dtype, (P, L)) for k in range(N)}
    traffic = {k: [contribution(k, 1, 0, 0, before[k], dtype)] for k in range(N)}
    traffic[2].append((contribution(2, 1, 0, 1, mine, dtype), (1, 0)))
    packets, res = run_unit(unit, {1: (list(range(N)), dtype, False)}, traffic,
                            reconfigure={3: {1: ([2], dtype, False)}})
    check_results(packets, {(1, 0): (0, list(range(N)), dtype, False, before),
                            (1, 1): (0, [2], dtype, False, {2: mine})}, N)
    got = [p for p in packets[2] if p.header.seq == 1]
    np.testing.assert_array_equal(np.array(got[0].flits, dtype=np.uint32), want)
    assert all(v == 0 for v in res["errors"].values()), res["errors"]


def _every_mask(build, expect):
    """For n in (1, 2, 3, 5, 8): the combinational outputs ``build(m, mask)`` returns, for
    every n-bit mask, against ``expect(value, n)``."""
    from amaranth.hdl import Module, Signal
    from amaranth.sim import Simulator

    for n in (1, 2, 3, 5, 8):
        m = Module()
        mask = Signal(n)
        outs = build(m, mask)
        sim = Simulator(m)

        async def bench(ctx, n=n, mask=mask, outs=outs):
            for value in range(1 << n):
                ctx.set(mask, value)
                await ctx.delay(1e-9)
                assert tuple(ctx.get(v) for v in outs) == expect(value, n), value

        sim.add_testbench(bench)
        sim.run()


def test_lowest_set_exhaustive():
    """The engine's log-depth pick of the lowest complete slot, against Python, every mask."""
    from hw.reduce import lowest_set

    _every_mask(lambda m, mask: (lowest_set(m, mask, "pick"),),
                lambda value, n: ((value & -value).bit_length() - 1 if value else 0,))


def test_lowest_two_exhaustive():
    """The engine's per-group pick, the lowest and second-lowest set bits, against Python,
    every mask of a group."""
    from hw.reduce import lowest_two

    def expect(value, n):
        bits = [i for i in range(n) if value >> i & 1] + [None, None]
        return (bits[0] is not None, bits[0] or 0, bits[1] is not None, bits[1] or 0)

    _every_mask(lambda m, mask: tuple(lowest_two(m, mask, "pick")), expect)

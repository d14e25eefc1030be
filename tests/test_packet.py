"""The flit layout and its Python codecs agree bit for bit with the RTL view."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.packet import (JOB_BITS, PORT_BITS, SEQ_BITS, SLOT_BITS, USER_LAYOUT, DType, Header,
                       Kind, Packet, decode, encode, field_table, flit_layout,
                       flits_to_packets, pack_flit, packet_to_flits, unpack_flit)
from sim.cosim.axis import axis_beats

headers = st.builds(
    Header,
    kind=st.sampled_from(list(Kind)), src=st.integers(0, (1 << PORT_BITS) - 1),
    dst=st.integers(0, (1 << PORT_BITS) - 1), job=st.integers(0, (1 << JOB_BITS) - 1),
    slot=st.integers(0, (1 << SLOT_BITS) - 1), seq=st.integers(0, (1 << SEQ_BITS) - 1),
    dtype=st.sampled_from(list(DType)))


@st.composite
def packets(draw):
    lanes = draw(st.integers(1, 8))
    count = draw(st.integers(1, 5))
    words = draw(st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=lanes, max_size=lanes),
                          min_size=count, max_size=count))
    return Packet(draw(headers), words)


@settings(max_examples=200)
@given(packets())
def test_packet_round_trip(packet):
    flits = packet_to_flits(packet)
    assert flits_to_packets(packet.lanes, flits) == [packet]


def test_layout_is_packed_without_gaps():
    for lanes in (1, 3, 8):
        rows = field_table(flit_layout(lanes))
        position = 0
        for row in sorted(rows, key=lambda r: r["offset"]):
            assert row["offset"] == position
            position += row["width"]
        assert position == flit_layout(lanes).size == 32 * lanes + 1 + 2 * PORT_BITS + \
            USER_LAYOUT.size


def test_python_codec_matches_rtl_view():
    """Bits packed in Python, read through the Amaranth view in simulation (and back)."""
    lanes = 3
    layout = flit_layout(lanes)
    rng = np.random.default_rng(5)
    cases = []
    for index in range(20):
        header = Header(kind=Kind(index % 6), src=int(rng.integers(64)),
                        dst=int(rng.integers(64)), job=int(rng.integers(256)),
                        slot=int(rng.integers(1 << 16)), seq=int(rng.integers(1 << 16)),
                        dtype=DType(index % 3))
        words = rng.integers(0, 2**32, size=lanes, dtype=np.uint64)
        cases.append((header, [int(w) for w in words], bool(index % 2)))

    flit = Signal(layout)
    raw = Signal(layout.size)
    m = Module()
    m.d.comb += raw.eq(flit)

    async def bench(ctx):
        for header, words, last in cases:
            bits = pack_flit(header, words, last)
            ctx.set(flit.as_value(), bits)
            assert ctx.get(flit.src) == header.src
            assert ctx.get(flit.dst) == header.dst
            assert ctx.get(flit.user.kind) == header.kind
            assert ctx.get(flit.user.dtype) == header.dtype
            assert ctx.get(flit.user.job) == header.job
            assert ctx.get(flit.user.slot) == header.slot
            assert ctx.get(flit.user.seq) == header.seq
            assert ctx.get(flit.last) == last
            assert [ctx.get(flit.data[k]) for k in range(lanes)] == words
            # and back: fields written through the view read as the same bits
            ctx.set(flit.as_value(), 0)
            ctx.set(flit.src, header.src)
            ctx.set(flit.dst, header.dst)
            ctx.set(flit.user, header.user())
            ctx.set(flit.last, last)
            for k in range(lanes):
                ctx.set(flit.data[k], words[k])
            assert ctx.get(raw) == bits
            assert unpack_flit(lanes, ctx.get(raw)) == (header, tuple(words), last)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_axis_beats_follow_layout():
    header = Header(kind=Kind.REDUCE_CONTRIB, src=5, dst=9, job=3, slot=77, seq=1234,
                    dtype=DType.BF16)
    packet = Packet(header, np.array([[1, 2], [3, 0xFFFFFFFF]], dtype=np.uint32))
    beats = axis_beats(packet)
    layout = flit_layout(2)
    for (tdata, tuser, tdest, tid, tlast), bits in zip(beats, packet_to_flits(packet)):
        fields = decode(layout, bits)
        assert tdata == encode(data.ArrayLayout(32, 2), fields["data"])
        assert tuser == encode(USER_LAYOUT, fields["user"])
        assert (tdest, tid, tlast) == (fields["dst"], fields["src"], fields["last"])
    assert [b[4] for b in beats] == [0, 1]


def test_header_validation_messages():
    with pytest.raises(ValueError, match=r"Header field src must be an integer in \[0, 63\]"):
        Header(kind=Kind.MEM_WRITE, src=64, dst=0)
    with pytest.raises(ValueError, match="Lane count must be at least 1, not 0"):
        flit_layout(0)
    with pytest.raises(ValueError, match="does not fit in 32 bits"):
        Packet(Header(kind=Kind.MEM_WRITE, src=0, dst=0), [[2**32]])
    with pytest.raises(ValueError, match="Stream ended inside a packet"):
        header = Header(kind=Kind.MEM_WRITE, src=0, dst=0)
        flits_to_packets(1, [pack_flit(header, [1], last=False)])

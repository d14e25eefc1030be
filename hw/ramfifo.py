"""A first-word-fall-through FIFO whose storage is placed, by choice, in block RAM (ECP5
DP16KD) or in LUT-RAM (``TRELLIS_DPR16X4``).

Same interface and cycle behaviour as Amaranth 0.5's ``fifo.SyncFIFOBuffered`` (an inner
memory of ``depth - 1`` words with a synchronous read port, plus the output word held in the
read port's own register), so every level, ``r_rdy`` and latency a model or a proof relies
on is unchanged, whichever the storage. The differences are two attributes on the memory, for
Yosys:

* ``ram_style``: ``"block"`` or ``"distributed"`` (LUT-RAM), where Yosys would otherwise
  choose by size. A FIFO a few words deep and ~300 bits wide costs eight DP16KD that hold a
  few words each, or about 73 LUT-RAM cells (four LUT sites each) per 16 words; which is
  better depends on the design around it (docs/hw.md, "Result FIFOs");
* ``no_rw_check``: the FIFO never reads the word it writes in the same cycle (a read needs the
  inner FIFO non-empty, a write needs it non-full, and the pointers are equal only when it is
  one or the other), so the read-during-write bypass Yosys would add is dead logic. Under
  ``platform="formal"`` that is asserted, beside the pointer invariants.

With ``lookahead=K`` the FIFO also tells what the top ``K`` bits of its head will be in the next
cycle, given this cycle's ``r_en`` and ``w_en`` (those bits sit in LUT-RAM whatever the storage
of the rest: they need an asynchronous read): ``r_rdy_next`` and ``r_data_next`` are the inputs
of the head's own registers, and ``r_data_next`` is chosen between two registers (the head and
the word after it), so no memory read is on its path. A consumer that must decide about the next
head a cycle early (the reduction unit's judge, which reads the slot table for it) takes them
instead of recomputing the FIFO's behaviour. Only those bits pay for it: they are stored in a
memory of their own, read asynchronously into the registers whose inputs are exposed; the rest
keep the synchronous read port, whose register Yosys maps to flip-flops with a clock enable
(read through a shared multiplexer, every bit would cost a LUT).

With ``read_slices=n`` the word (the part below the lookahead bits) is stored in ``n`` memories
side by side, each with its own read port whose enable comes from copies of the FIFO's ``r_rdy``
and "not empty" registers kept for that slice, and with its own copies of the write and read
pointers (the LUT-RAM cells' addresses): k-bit LFSRs of their own where a memory of 2**k words
takes no more LUT-RAM columns than the FIFO's words (the pointers then run round 2**k - 1
addresses, address 0 unused, whatever the depth), k-bit de Bruijn counters (all 2**k states)
where the FIFO holds exactly 2**k words, else loaded from the pointers' next values.
The read enable loads the head register, the width of the word: driven by one net, its clock
enables were a net of a fan-out of hundreds spread wherever the placer put the head's bits, at
the end of the consumer's ``ready`` (at 8 × 8 × 64 the switch's critical path,
docs/timing-closure.md, "The head's read enable replicated"). With the copies the consumer's
``ready`` reaches ``n`` LUTs, each beside its slice. ``keep`` stops Yosys merging the copies.
(The write side is not sliced: a write enable per slice, each from a copy of the "not full"
register, cost about 300 LUT4s at 4 × 8 × 16, docs/timing-closure.md.)

With ``data_lag=True`` the bits below the lookahead are the head's as they were a cycle
earlier: ``r_data[:width - lookahead]`` in cycle t + 1 is the head's in cycle t. A consumer
that uses a word's low bits a cycle after it pops the word (the reduction unit writes a flit's
data into its bank the cycle after the judge pops it) then takes them from the FIFO's own
register instead of a register of its own behind it. The synchronous read is the same read one
cycle later, at the address and with the enable it had, both registered. The word it reads is
still in the memory: a slot is never written in the cycle it is read, and the cycle after, a
write to it (the FIFO was full) lands at the clock edge where the late read samples it, and a
read port that is not transparent samples the word before the write (LUT-RAM: the read is
asynchronous and its register takes the old word; Yosys adds nothing). So the lag costs a
register for the address and one for the enable per read slice, and no memory.

Every FIFO tells ``r_rdy_next``, whether it will have a head next cycle given this cycle's
``r_en`` (from its own registers: no memory read): the switch sends it a cycle ahead to the
egress arbiters, which then see each requester's ``valid`` from a register of their own.
"""

from amaranth.asserts import Initial
from amaranth.hdl import Assert, Assume, Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib import fifo
from amaranth.lib.memory import Memory

from .spec import LUTRAM_WORDS

__all__ = ["RamFIFO", "STORAGE_STYLES"]

#: Yosys's ``ram_style`` for each storage choice.
STORAGE_STYLES = {"block": "block", "lut": "distributed"}


def _wrap(value, modulo):
    return Mux(value == modulo - 1, 0, value + 1)


#: Taps of a maximal-length k-bit LFSR (the 0-based bits XORed into bit 0 as the state shifts
#: up): from any nonzero state it steps through all 2**k - 1 of them.
LFSR_TAPS = {2: (1, 0), 3: (2, 1), 4: (3, 2), 5: (4, 2), 6: (5, 4), 7: (6, 5), 8: (7, 5, 4, 3)}


def lfsr_step(state, taps):
    """The LFSR's next state: the signal ``state`` shifted up, the XOR of its ``taps`` into
    bit 0."""
    feedback = state[taps[0]]
    for tap in taps[1:]:
        feedback = feedback ^ state[tap]
    return Cat(feedback, state[:-1])


def de_bruijn_step(state, taps):
    """:func:`lfsr_step` with the all-zero state let in: the state with only its top bit set
    steps to zero, and zero to 1, so the k bits step through all 2**k states. (The bits
    below the top one all zero is the only case that changes the feedback; the top bit is
    always a tap.)"""
    return Cat(lfsr_step(state, taps)[0] ^ (state[:-1] == 0), state[:-1])


def lfsr_sequence(taps, length, de_bruijn=False):
    """The first ``length`` states from 1, as :func:`lfsr_step` (or, with ``de_bruijn``,
    :func:`de_bruijn_step`) steps them (ints)."""
    states, state, mask = [], 1, (1 << max(taps) + 1) - 1
    for _ in range(length):
        states.append(state)
        feedback = 0
        for tap in taps:
            feedback ^= state >> tap & 1
        if de_bruijn and state & mask >> 1 == 0:
            feedback ^= 1
        state = (state << 1 | feedback) & mask
    return states


class RamFIFO(Elaboratable, fifo.FIFOInterface):
    """``SyncFIFOBuffered(width=…, depth=…)`` with its storage in block RAM (``storage =
    "block"``) or LUT-RAM (``"lut"``); ``depth`` ≥ 2. ``r_rdy_next`` is next cycle's ``r_rdy``;
    ``lookahead=K`` adds ``r_data_next`` (the top ``K`` bits of the next cycle's head), and
    the two values ``r_rdy_next`` and ``r_data_next`` can take, from registers alone:
    ``r_rdy_if_read`` / ``r_data_if_read`` when this cycle's ``r_en`` is high,
    ``r_rdy_if_kept`` / ``r_data_if_kept`` when it is low, for a consumer that knows the read
    enable from something cheaper than the FIFO's own ``r_en``. Two cycles ahead, from
    registers and the memory's asynchronous read: ``r_rdy_in_two[n]`` and
    ``r_data_in_two[n]`` are ``r_rdy`` and the top ``K`` bits of the head two cycles on if
    the FIFO is read ``n`` times (0, 1 or 2) in this cycle and the next, for a consumer that
    must gather the head a cycle before it decides about it (the reduction unit's judge).
    ``r_fresh_in_two[n]`` tells (from registers) whether ``r_data_in_two[n]`` is the word
    written this cycle; with ``fresh_input=True`` that word's top bits there are taken from
    the input ``w_fresh`` instead of ``w_data``, for a consumer that finishes some of those
    bits after it gathers them (the reduction unit's foreign-slot check).
    ``data_lag=True``: the bits below the lookahead lag the head by a cycle."""

    def __init__(self, *, width, depth, storage="block", lookahead=0, read_slices=1,
                 data_lag=False, fresh_input=False):
        if depth < 2:
            raise ValueError(f"RamFIFO depth must be at least 2, not {depth}")
        if storage not in STORAGE_STYLES:
            raise ValueError(f"RamFIFO storage must be one of {', '.join(STORAGE_STYLES)}, "
                             f"not {storage!r}")
        if not isinstance(lookahead, int) or not 0 <= lookahead <= width:
            raise ValueError(f"RamFIFO lookahead must be a bit count from 0 to the width "
                             f"{width}, not {lookahead!r}")
        if (not isinstance(read_slices, int) or isinstance(read_slices, bool) or
                not 1 <= read_slices <= width):
            raise ValueError(f"RamFIFO read_slices must be a count from 1 to the width "
                             f"{width}, not {read_slices!r}")
        if read_slices > max(1, width - lookahead):
            raise ValueError(f"RamFIFO read_slices must be at most the {width - lookahead} bits "
                             f"below the lookahead, not {read_slices!r}")
        if not isinstance(data_lag, bool):
            raise ValueError(f"RamFIFO data_lag must be True or False, not {data_lag!r}")
        if data_lag and lookahead == width:
            raise ValueError("RamFIFO data_lag needs bits below the lookahead, and the "
                             f"lookahead is the whole width {width}")
        if not isinstance(fresh_input, bool):
            raise ValueError(f"RamFIFO fresh_input must be True or False, not {fresh_input!r}")
        if fresh_input and not lookahead:
            raise ValueError("RamFIFO fresh_input needs a lookahead")
        super().__init__(width=width, depth=depth)
        self.storage = storage
        self.fresh_input = fresh_input
        self.data_lag = data_lag
        self.lookahead = lookahead
        self.read_slices = read_slices
        self.level = Signal(range(depth + 1))
        self.r_rdy_next = Signal()
        if lookahead:
            self.r_data_next = Signal(lookahead)
            self.r_rdy_if_read, self.r_rdy_if_kept = Signal(), Signal()
            # next cycle's `r_rdy_if_read` (whether the memory will hold a word), so a
            # consumer can keep a decision about the head two cycles on in a register
            self.r_rdy_if_read_next = Signal()
            self.r_data_if_read = Signal(lookahead)
            self.r_data_if_kept = Signal(lookahead)
            # two cycles on, after n = 0, 1 or 2 reads in this cycle and the next
            self.r_rdy_in_two = [Signal(name=f"r_rdy_in_two_{n}") for n in range(3)]
            self.r_data_in_two = [Signal(lookahead, name=f"r_data_in_two_{n}")
                                  for n in range(3)]
            self.r_fresh_in_two = [Signal(name=f"r_fresh_in_two_{n}") for n in range(3)]
            if fresh_input:
                self.w_fresh = Signal(lookahead)

    def _copy_taps(self):
        """How the read slices' pointer copies step, and the taps they step by: ``(None,
        None)`` with no copies, ``(None, "next")`` where they are loaded from the pointers'
        next values, else ``(taps, "lfsr")`` or ``(taps, "de_bruijn")``."""
        if self.read_slices == 1 or self.width == self.lookahead:
            return None, None
        inner_depth = self.depth - 1
        def columns(words):
            return -(-words // LUTRAM_WORDS)
        k = inner_depth.bit_length()
        if columns(1 << k) == columns(inner_depth) and k in LFSR_TAPS:
            return LFSR_TAPS[k], "lfsr"
        if inner_depth == 1 << k - 1 and k - 1 in LFSR_TAPS:
            return LFSR_TAPS[k - 1], "de_bruijn"
        return None, "next"

    @property
    def copy_stepping(self):
        """How the read slices' pointer copies step: ``"lfsr"``, ``"de_bruijn"``, ``"next"``
        (loaded from the pointers' next values), or ``None`` with one slice."""
        return self._copy_taps()[1]

    def elaborate(self, platform):
        m = Module()
        do_write = self.w_rdy & self.w_en
        m.d.comb += [self.w_level.eq(self.level), self.r_level.eq(self.level)]

        inner_depth = self.depth - 1
        inner_level = Signal(range(inner_depth + 1))
        # Read slices' pointer copies step as k-bit LFSRs of their own (below; one LUT a copy
        # instead of an incrementer of four) where the pointers can run round 2**k - 1
        # addresses at no cost in memory: a ring at least as long as the FIFO holds words
        # (the switch's ingress FIFOs: 15 words; the int32 result FIFOs: 10, in a ring of
        # 15), in a memory of 2**k words (address 0 unused) that takes no more LUT-RAM columns
        # than the words would. The pointers then wrap at the ring, not at the depth; how full
        # the FIFO is stays the level's alone. Where the FIFO holds exactly 2**k words (the
        # reduction unit's hold FIFOs at 8 x 8: 16), a ring of 2**(k+1) - 1 would take a
        # second column, so the copies step as de Bruijn counters instead (the LFSR with the
        # all-zero state let in: still one LUT a copy), round all 2**k addresses: the ring is
        # the depth. Elsewhere the copies take the next values.
        taps, stepping = self._copy_taps()
        de_bruijn = stepping == "de_bruijn"
        ring = inner_depth if de_bruijn or not taps else (1 << max(taps) + 1) - 1
        memory_depth = ring + 1 if taps and not de_bruijn else ring
        step = de_bruijn_step if de_bruijn else lfsr_step
        # Whether the memory holds a word: a register kept equal to `inner_level != 0`, so
        # the lookahead's choices below start from flip-flops, not from the level's compare
        # (in the routed 4 x 8 x 16 switch a hold FIFO's lookahead began the critical path:
        # the level -> the compare -> a wire across the die to the judge).
        # (`keep` where read slices keep copies of it: Yosys merged it into one, and the
        # lookahead's logic then started at that slice's flip-flop, wherever its lane lies)
        inner_r_rdy = Signal(name="inner_r_rdy",
                             attrs={"keep": 1} if self.read_slices > 1 else {})
        do_inner_read = inner_r_rdy & (~self.r_rdy | self.r_en)
        # Whether the memory has room: a register kept equal to `inner_level != inner_depth`,
        # so `w_rdy` is a flip-flop and the write enable (`w_en & w_rdy`, the storage's whole
        # width) does not start at the level's compare (in the routed 4 x 8 x 16 switch an
        # ingress FIFO's level -> `tready` -> the write enable -> `after` was one seed's
        # critical path; docs/timing-closure.md).
        not_full = Signal(init=1, name="not_full")
        not_full_next = Signal(name="not_full_next")
        m.d.comb += [
            not_full_next.eq(Mux(do_write & ~do_inner_read, inner_level != inner_depth - 1,
                                 Mux(do_inner_read & ~do_write, 1, not_full))),
            self.w_rdy.eq(not_full),
        ]
        m.d.sync += not_full.eq(not_full_next)

        produce = Signal(range(ring))
        consume = Signal(range(ring))
        produce_next = Signal.like(produce, name="produce_next")
        consume_next = Signal.like(consume, name="consume_next")
        attrs = {"ram_style": STORAGE_STYLES[self.storage], "no_rw_check": 1}
        plain = self.width - self.lookahead      # low bits: the synchronous read port
        # next cycle's r_rdy, as the update below sets it
        m.d.comb += self.r_rdy_next.eq(inner_r_rdy | (self.r_rdy & ~self.r_en))
        # next cycle's inner_level != 0, as the updates below set it
        nonempty_next = Signal(name="inner_r_rdy_next")
        m.d.comb += nonempty_next.eq(
            Mux(do_write, 1, Mux(do_inner_read, inner_level != 1, inner_r_rdy)))
        m.d.sync += inner_r_rdy.eq(nonempty_next)
        if self.lookahead:
            # Whether the memory holds exactly one word: a register kept equal to
            # `inner_level == 1`, so the lookahead's choices below (is the written word the
            # next oldest, does the memory hold two) are flip-flops of this FIFO's, not
            # comparisons of its pointers.
            inner_one = Signal(name="inner_one")
            m.d.sync += inner_one.eq(Mux(do_write & ~do_inner_read, ~inner_r_rdy,
                                         Mux(do_inner_read & ~do_write, inner_level == 2,
                                             inner_one)))
        copies = []   # (r_rdy, not empty) kept per read slice, when there are several
        if self.read_slices > 1:
            for j in range(self.read_slices):
                rdy = Signal(name=f"r_rdy_{j}", attrs={"keep": 1})
                nonempty = Signal(name=f"nonempty_{j}", attrs={"keep": 1})
                m.d.sync += [rdy.eq(self.r_rdy_next), nonempty.eq(nonempty_next)]
                copies.append((rdy, nonempty))
        read_addr, lagged_reads, plain_attrs = consume, [], attrs
        pointer_copies, lagged_addrs = [], []   # per read slice, when there are several
        if plain:
            bounds = [plain * j // self.read_slices for j in range(self.read_slices + 1)]
            if self.data_lag:   # the read a cycle late: its address and enables registered
                read_addr = Signal.like(consume, name="consume_lag")
                m.d.sync += read_addr.eq(consume)
                # a late read meets the write of the same slot when the FIFO was full: it
                # must see the word before the write (a read port that is not transparent)
                plain_attrs = {"ram_style": attrs["ram_style"]}
            for j, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
                name = "storage" if self.read_slices == 1 else f"storage{j}"
                storage = m.submodules[name] = Memory(
                    shape=hi - lo, depth=memory_depth, init=[],
                    attrs=plain_attrs)
                w_port = storage.write_port()
                r_port = storage.read_port(domain="sync")
                slice_produce, slice_read_addr = produce, read_addr
                if copies:
                    rdy, nonempty = copies[j]
                    read_here = nonempty & (~rdy | self.r_en)   # do_inner_read, from copies
                    # and the slice's own pointers, so each pointer bit reaches the LUT-RAM
                    # cells of one slice, not every cell of the word across the die (the
                    # pointers of the result and ingress FIFOs were a fifth of the 8 x 8 x 64
                    # switch's overused wires: docs/timing-closure.md, "The FIFOs' pointers
                    # per read slice"). An LFSR copy steps on its own, so only the enables
                    # cross the slices; copies loaded from the next values leave 4-5-bit nets
                    # across the die (router2's plateau at 8 x 8 x 64, seed 3: 5,848 overused
                    # wires with every copy so, 2,493 with the ingress FIFOs' as LFSRs, 838
                    # with the result FIFOs' too; and the hold FIFOs' copies, loaded so, were
                    # the routed switch's paths next to the critical one at 6d5acbb).
                    if taps:
                        width = max(taps) + 1
                        slice_produce = Signal(width, init=1, name=f"produce_{j}",
                                               attrs={"keep": 1})
                        slice_consume = Signal(width, init=1, name=f"consume_{j}",
                                               attrs={"keep": 1})
                        with m.If(do_write):
                            m.d.sync += slice_produce.eq(step(slice_produce, taps))
                        with m.If(read_here):
                            m.d.sync += slice_consume.eq(step(slice_consume, taps))
                    else:
                        slice_produce = Signal.like(produce, name=f"produce_{j}",
                                                    attrs={"keep": 1})
                        slice_consume = Signal.like(consume, name=f"consume_{j}",
                                                    attrs={"keep": 1})
                        m.d.sync += [slice_produce.eq(produce_next),
                                     slice_consume.eq(consume_next)]
                    slice_read_addr = slice_consume
                    pointer_copies.append((slice_produce, slice_consume))
                else:
                    read_here = do_inner_read
                if self.data_lag:
                    read_late = Signal(name="read_lag" if len(bounds) == 2 else f"read_lag_{j}")
                    m.d.sync += read_late.eq(read_here)
                    lagged_reads.append(read_late)
                    read_here = read_late
                    if copies:   # the slice's own late address
                        slice_read_addr = Signal.like(slice_consume, name=f"consume_lag_{j}")
                        m.d.sync += slice_read_addr.eq(slice_consume)
                        lagged_addrs.append(slice_read_addr)
                m.d.comb += [w_port.addr.eq(slice_produce), w_port.data.eq(self.w_data[lo:hi]),
                             w_port.en.eq(do_write), r_port.addr.eq(slice_read_addr),
                             r_port.en.eq(read_here), self.r_data[lo:hi].eq(r_port.data)]
        if self.lookahead:
            # The same read as the synchronous port's, written out, and a word ahead: `after`
            # is a register that holds the inner FIFO's oldest word (the memory at `consume`)
            # whenever it has one, so the next head is a choice between two registers, with
            # no memory read or pointer on its path. `after` is loaded from an asynchronous
            # read one word further on (at `consume + 1`) when the inner FIFO is read, or from
            # the written word when that word becomes the oldest.
            # (LUT-RAM whatever the storage of the rest: the read is asynchronous)
            ahead = m.submodules.ahead = Memory(shape=self.lookahead, depth=ring,
                                                init=[], attrs={**attrs,
                                                                "ram_style": "distributed"})
            w_port = ahead.write_port()
            r_port = ahead.read_port(domain="comb")
            head = Signal(self.lookahead, name="head", reset_less=True)
            after = Signal(self.lookahead, name="after", reset_less=True)
            # `consume + 1`, wrapped, as a register of its own (advanced with `consume`), so
            # the asynchronous read's address is a flip-flop, not an incrementer behind one:
            # in the routed 4 x 8 x 16 switch a hold FIFO's `consume` -> the increment -> a
            # wire across the die to this memory -> the judge's gather was one seed's critical
            # path (docs/timing-closure.md).
            following = Signal.like(consume, name="following", init=1 % ring)
            with m.If(do_inner_read):
                m.d.sync += following.eq(_wrap(following, ring))
            m.d.comb += [w_port.addr.eq(produce), w_port.data.eq(self.w_data[plain:]),
                         w_port.en.eq(do_write), r_port.addr.eq(following),
                         self.r_rdy_if_read_next.eq(nonempty_next),
                         self.r_data_next.eq(Mux(do_inner_read, after, head)),
                         self.r_data[plain:].eq(head),
                         # the same, for each value of r_en (do_inner_read is
                         # inner_r_rdy & (~r_rdy | r_en))
                         self.r_rdy_if_read.eq(inner_r_rdy),
                         self.r_rdy_if_kept.eq(inner_r_rdy | self.r_rdy),
                         self.r_data_if_read.eq(Mux(inner_r_rdy, after, head)),
                         self.r_data_if_kept.eq(Mux(inner_r_rdy & ~self.r_rdy, after, head))]
            m.d.sync += head.eq(self.r_data_next)
            # Two cycles on, the head is the n-th word the FIFO holds now, counting the word
            # written this cycle last (written at t, it heads an empty FIFO at t + 2), where
            # n is the number of reads by then; there is none if the FIFO holds fewer. Two
            # reads need a head now (r_rdy), so the words are: the head, `after`, the
            # memory's word after that (the asynchronous read at `following`) and the word
            # being written.
            two = Signal(name="inner_two")               # the memory holds two words or more
            m.d.comb += two.eq(inner_r_rdy & ~inner_one)
            written = self.w_data[plain:]
            fresh = self.w_fresh if self.fresh_input else written
            second = r_port.data
            ready, one = self.r_rdy, inner_r_rdy
            m.d.comb += [
                self.r_data_in_two[0].eq(Mux(ready, head, Mux(one, after, fresh))),
                self.r_rdy_in_two[0].eq(ready | one | do_write),
                self.r_fresh_in_two[0].eq(~ready & ~one),
                self.r_data_in_two[1].eq(Mux(ready, Mux(one, after, fresh),
                                             Mux(two, second, fresh))),
                self.r_rdy_in_two[1].eq(Mux(ready, one | do_write, two | (one & do_write))),
                self.r_fresh_in_two[1].eq(Mux(ready, ~one, ~two)),
                self.r_data_in_two[2].eq(Mux(two, second, fresh)),
                self.r_rdy_in_two[2].eq(ready & (two | (one & do_write))),
                self.r_fresh_in_two[2].eq(~two),
            ]
            # Whether the written word becomes the oldest: the memory is empty, or holds one
            # word and this cycle reads it. Asked of the level's registers, not of the
            # pointers: `produce` sits by the writer, and in the routed 8 x 8 x 64 switch a
            # hold FIFO's `produce` -> a wire across the die -> its comparison with `consume`
            # -> `after`'s clock enable was one seed's critical path (docs/timing-closure.md,
            # "The written word's turn from the level"). (A write never meets a full memory,
            # so the pointers meet exactly when the level is 0, or 1 before a read.)
            with m.If(do_write & Mux(do_inner_read, inner_one, ~inner_r_rdy)):
                m.d.sync += after.eq(written)
            with m.Elif(do_inner_read):
                m.d.sync += after.eq(second)
        m.d.comb += [
            produce_next.eq(Mux(do_write, _wrap(produce, ring), produce)),
            # (with a lookahead, `following` is the increment)
            consume_next.eq(Mux(do_inner_read,
                                following if self.lookahead else _wrap(consume, ring),
                                consume))]
        m.d.sync += [produce.eq(produce_next), consume.eq(consume_next)]
        with m.If(do_write & ~do_inner_read):
            m.d.sync += inner_level.eq(inner_level + 1)
        with m.If(do_inner_read & ~do_write):
            m.d.sync += inner_level.eq(inner_level - 1)
        with m.If(do_inner_read):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        m.d.comb += self.level.eq(inner_level + self.r_rdy)

        if platform == "formal":
            # The pointer invariants (as Amaranth's own FIFOs state them), assumed in the
            # initial state of an induction and asserted after; and the reason no_rw_check
            # is safe: a write never meets a read of the same word. (The pointers run round
            # the ring, which may hold more addresses than the FIFO holds words.)
            invariants = [produce < ring, consume < ring, inner_level <= inner_depth,
                          (produce != consume) | (inner_level == 0) |
                          (inner_level == ring),
                          (produce <= consume) | (inner_level == produce - consume),
                          (produce >= consume) |
                          (inner_level == ring + produce - consume),
                          inner_r_rdy == (inner_level != 0),
                          not_full == (inner_level != inner_depth)]
            if self.lookahead:
                invariants += [following == _wrap(consume, ring),
                               inner_one == (inner_level == 1)]
            if lagged_reads:   # the late read's address and enables: last cycle's
                was_read = Signal(name="inner_read_lag")
                m.d.sync += was_read.eq(do_inner_read)
                invariants += [consume == Mux(was_read, _wrap(read_addr, ring),
                                              read_addr),
                               *(late == was_read for late in lagged_reads)]
            with m.If(Initial()):
                m.d.comb += [Assume(inv) for inv in invariants]
            with m.Else():
                m.d.comb += [Assert(inv) for inv in invariants]
            m.d.comb += Assert(~(do_write & do_inner_read & (produce == consume)))
            # each read slice's copies are the registers they copy
            same = [(rdy == self.r_rdy) & (nonempty == inner_r_rdy) for rdy, nonempty in copies]
            def address(pointer):   # a slice's address for a pointer's value
                if not taps:
                    return pointer
                value = Const(1, max(taps) + 1)
                for i, state in enumerate(lfsr_sequence(taps, ring, de_bruijn)):
                    value = Mux(pointer == i, state, value)
                return value
            if pointer_copies:
                produce_at, consume_at = address(produce), address(consume)
                same += [(w == produce_at) & (r == consume_at) for w, r in pointer_copies]
            if lagged_addrs:
                read_at = address(read_addr)
                same += [late == read_at for late in lagged_addrs]
            with m.If(Initial()):
                m.d.comb += [Assume(eq) for eq in same]
            with m.Else():
                m.d.comb += [Assert(eq) for eq in same]
            if self.lookahead:
                # `after` is the oldest word of the inner FIFO whenever it has one
                oldest = ahead.read_port(domain="comb")
                m.d.comb += oldest.addr.eq(consume)
                holds = (inner_level == 0) | (after == oldest.data)
                with m.If(Initial()):
                    m.d.comb += Assume(holds)
                with m.Else():
                    m.d.comb += Assert(holds)
        return m

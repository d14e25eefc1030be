"""The switch specification: every parameter of innet's switch, validated once, and every
depth and latency that follows from them.

The RTL (:class:`hw.switch.Switch`, :class:`hw.reduce.ReductionUnit`, the export wrappers), the
replay's configuration, both fast-model cores and the command line's choices take a
:class:`SwitchSpec` or derive from it; nothing else writes a depth, a latency, a range or the
list of policies or element types a second time.
"""

import enum
from dataclasses import dataclass

from .errors import ParameterError, ParameterTypeError, check_int
from .packet import JOB_BITS, MAX_PORTS, SLOT_BITS, DType

__all__ = ["SwitchSpec", "Policy", "ELEMENT_TYPES", "element_type", "ParameterError",
           "ParameterTypeError", "MIN_PORTS", "MAX_SLOTS", "MAX_JOBS", "MAX_CHUNK_FLITS",
           "INGRESS_LATENCY", "HOLD_READ_LATENCY", "ENGINE_PICK_LATENCY", "FP_ADD_STAGES",
           "BANK_READ_LATENCY",
           "EGRESS_PICK_LATENCY", "EGRESS_OUTPUT_LATENCY", "LUTRAM_WORDS",
           "one_column_storage"]

#: A switch has at least two ports (one reduction needs two members) and at most
#: :data:`hw.packet.MAX_PORTS` (a port number is ``PORT_BITS`` wide).
MIN_PORTS = 2
#: Slot ids and job ids are ``SLOT_BITS`` / ``JOB_BITS`` wide.
MAX_SLOTS = 1 << SLOT_BITS
MAX_JOBS = 1 << JOB_BITS
#: Longest chunk, flits (a bank holds ``slots × chunk_flits`` flits per port).
MAX_CHUNK_FLITS = 1 << 16

#: Cycles from a flit entering an ingress FIFO to it being at the FIFO's head (the buffered
#: FIFO of :class:`hw.switch.Switch`: write, then the registered read port).
INGRESS_LATENCY = 2
#: Cycles from a contribution flit entering its port's hold FIFO in the reduction unit to it
#: heading the FIFO: a write register (stage 0's checks end at flip-flops beside the port),
#: then a buffered FIFO (write, then a registered read port), so the judge starts from a
#: register rather than behind the FIFO's LUT-RAM read (docs/hw.md, Buffered hold FIFOs).
HOLD_READ_LATENCY = 3
#: Words in one ECP5 LUT-RAM cell (``TRELLIS_DPR16X4``: 16 words × 4 bits); a deeper memory
#: takes a second column of cells and a multiplexer behind them.
LUTRAM_WORDS = 16


def one_column_storage(depth):
    """A buffered FIFO's storage by the one-column rule: ``"lut"`` (LUT-RAM) while its
    ``depth - 1`` stored words (the head is a register) fit one column of LUT-RAM cells,
    else ``"block"`` (DP16KD)."""
    return "lut" if depth - 1 <= LUTRAM_WORDS else "block"

#: Cycles from a chunk's last contribution flit at the reduction unit to the first cycle its
#: engine may start the chunk, when its header met the judge without waiting for its turn:
#: the flit passes the hold FIFO, its landing is registered beside the slot table and then in
#: the table, then the engine's pick in two registered steps (per group of 8 slots, then
#: across groups: :mod:`hw.reduce`). A header's wait for its turn (0 to ``ports - 1``
#: cycles) adds to it.
ENGINE_PICK_LATENCY = 5
#: Pipeline stages of each floating-point adder in the reduction tree (:func:`hw.fpadd.float_add`):
#: a whole fp32 addition in one cycle limits the switch to what one adder reaches alone; seven
#: stages per tree level cut it at all six of its cuts (comparison, swap, aligning shift,
#: addition, leading-zero count, normalising shift), each stage a few LUT levels or one carry
#: chain, for 150 MHz on the ECP5 (docs/hw.md, Synthesis). A unit built for int32 only keeps
#: one stage per level.
FP_ADD_STAGES = 7
#: Cycles from the engine issuing a flit's read to the banks' words at the adder tree's leaves:
#: the read address registered beside each bank (a copy per bank: the engine's choice does not
#: cross the die to the block RAMs' address pins in the cycle it is made), the block RAM's
#: synchronous read, and its output registered (the RAM's clock-to-out, 5.6 ns on the ECP5, is
#: not followed by an adder in the same cycle).
BANK_READ_LATENCY = 3
#: Cycles between the engine reading a chunk's flit and the result flit reaching the egress
#: arbiters, besides the reduction pipeline: the result FIFO's write and registered read.
RESULT_FIFO_LATENCY = 2
#: Cycles an egress arbiter (:mod:`hw.arbiter`) takes to see a requester: it chooses one cycle
#: ahead and registers the choice, so a packet whose first flit is presented to an idle arbiter
#: at cycle t leaves the arbiter at t + 1 at the earliest. (A requester whose last flit leaves
#: at t counts as requesting at t, so its next packet can follow at t + 1.)
EGRESS_PICK_LATENCY = 1
#: Cycles from an egress arbiter's output to the switch's port: the register on the link from
#: the arbiter's multiplexer (:class:`hw.regslice.LinkRegister`) and the egress stage
#: (:class:`hw.regslice.CreditSlice`, two flits, its room known a cycle ahead).
EGRESS_OUTPUT_LATENCY = 2


class Policy(str, enum.Enum):
    """Egress arbitration policy, chosen at elaboration time (:mod:`hw.arbiter`)."""

    RR = "rr"
    PRIO = "prio"
    WRR = "wrr"
    DRR = "drr"

    @classmethod
    def parse(cls, value):
        """``value`` (a :class:`Policy` or its name) as a :class:`Policy`.

        Raises
        ------
        ParameterError
            ``"Policy must be one of rr, prio, wrr, drr, not 'fifo'"``.
        """
        try:
            return cls(value)
        except ValueError:
            raise ParameterError(f"Policy must be one of {', '.join(cls.names())}, "
                                 f"not {value!r}", "policy") from None

    def __str__(self):   # "rr", in messages, labels and f-strings alike
        return self.value

    def __format__(self, spec):
        return format(self.value, spec)

    @classmethod
    def names(cls):
        """The policy names, in declaration order: ``("rr", "prio", "wrr", "drr")``."""
        return tuple(p.value for p in cls)


#: Element types by name, in the order of their wire code (:class:`hw.packet.DType`).
ELEMENT_TYPES = tuple(d.name.lower() for d in DType)


def element_type(name):
    """The wire code (:class:`hw.packet.DType`) of element type ``name`` (``"fp32"``).

    Raises
    ------
    ParameterError
        If ``name`` is not one of :data:`ELEMENT_TYPES`.
    """
    if name not in ELEMENT_TYPES:
        raise ParameterError(f"Element type must be one of {', '.join(ELEMENT_TYPES)}, "
                             f"not {name!r}", "dtype")
    return DType[name.upper()]


@dataclass(frozen=True, kw_only=True)
class SwitchSpec:
    """An N-port switch with an in-switch reduction unit. Keyword-only; validated on creation.

    Parameters
    ----------
    ports : int
        Ports, ``MIN_PORTS``..``MAX_PORTS`` (2..64). Reduction members are port numbers.
    lanes : int
        32-bit payload lanes per flit, at least 1.
    slots : int
        Reduction slot pool, 1..65536.
    chunk_flits : int
        Flits per reduction contribution (one chunk), 1..65536.
    jobs : int
        Job-table entries (job ids ``0..jobs-1``), 1..256.
    dtypes : tuple of str
        Element types to build adders for: a non-empty subset of :data:`ELEMENT_TYPES`, in
        the caller's order (it names exported modules).
    policy : Policy or str
        Egress arbitration policy (stored as a :class:`Policy`).
    ingress_depth : int, optional
        Ingress FIFO depth, flits, at least 2; default ``max(16, 2 × chunk_flits)`` (see
        :attr:`ingress_fifo_flits`).
    result_fifo_depth : int, optional
        Result FIFO depth per egress, flits; default reduction pipeline depth + 4, at least
        the pipeline depth + 1 (see :attr:`result_fifo_flits`).

    Raises
    ------
    ParameterError
        On a value out of range (:class:`ParameterTypeError`, also a ``TypeError``, on a
        value of the wrong type); the message names the parameter.
    """

    ports: int
    lanes: int = 1
    slots: int
    chunk_flits: int
    jobs: int = 16
    dtypes: tuple = ELEMENT_TYPES
    policy: Policy = Policy.RR
    ingress_depth: int | None = None
    result_fifo_depth: int | None = None

    def __post_init__(self):
        check_int("Port count", self.ports, MIN_PORTS, MAX_PORTS, parameter="ports")
        check_int("Lane count", self.lanes, 1, parameter="lanes")
        check_int("Slot count", self.slots, 1, MAX_SLOTS, parameter="slots")
        check_int("Chunk length", self.chunk_flits, 1, MAX_CHUNK_FLITS, parameter="chunk_flits")
        check_int("Job count", self.jobs, 1, MAX_JOBS, parameter="jobs")
        dtypes = tuple(self.dtypes) if not isinstance(self.dtypes, str) else (self.dtypes,)
        if not dtypes or any(d not in ELEMENT_TYPES for d in dtypes):
            raise ParameterError(f"Element types must be a non-empty subset of "
                                 f"{', '.join(ELEMENT_TYPES)}, not {dtypes!r}", "dtypes")
        object.__setattr__(self, "dtypes", dtypes)
        object.__setattr__(self, "policy", Policy.parse(self.policy))
        if self.ingress_depth is not None:
            check_int("Ingress depth", self.ingress_depth, 2, parameter="ingress_depth")
        if self.result_fifo_depth is not None:
            check_int("Result FIFO depth", self.result_fifo_depth,
                      self.reduction_pipeline_depth + 1, parameter="result_fifo_depth")

    # -- derived: depths ---------------------------------------------------------------------

    @property
    def ingress_fifo_flits(self):
        """Ingress FIFO depth, flits: ``ingress_depth`` or ``max(16, 2 × chunk_flits)`` (two
        chunks, so a contribution can stream in while the previous one drains)."""
        return self.ingress_depth or max(16, 2 * self.chunk_flits)

    @property
    def judge_hold_flits(self):
        """Depth of each port's hold FIFO in the reduction unit, flits: ``chunk_flits + ports
        + 2``, its write register's word included. A contribution's flits wait there while its
        header passes the write register and the FIFO's registered read and waits for the
        judge's turn (up to ``ports + 1`` cycles in all, the judge's latency beyond a plain
        FIFO's one cycle: :attr:`judge_wait_cycles`); a first flit
        enters only with room for a whole chunk behind what the FIFO holds, so with
        ``chunk_flits`` a multiple of ``ports`` the unit never back-pressures well-formed
        traffic (docs/hw.md, One judge). The buffered FIFO keeps all but its head word and the
        write register's in memory: 16 words of LUT-RAM at the 8 × 8-flit target, one
        column."""
        return self.chunk_flits + self.ports + HOLD_READ_LATENCY - 1

    @property
    def line_rate(self):
        """Whether the reduction unit takes contributions at one flit per cycle per port:
        the judge serves each port once every ``ports`` cycles, so a port keeps up when its
        chunks are a whole number of turns long (``chunk_flits`` a multiple of ``ports``).
        Otherwise each chunk waits up to ``ports - 1`` cycles more for its turn and the unit
        back-pressures its ingress."""
        return self.chunk_flits % self.ports == 0

    @property
    def judge_wait_cycles(self):
        """Longest time a header spends between entering its hold FIFO and being judged,
        beyond the one cycle a plain FIFO would take, cycles: ``ports + 1`` = the write
        register's and the registered read's extra cycles (:data:`HOLD_READ_LATENCY`) plus
        ``ports - 1`` for the judge's turn
        (the member judged last when every member's header arrives in the same cycle)."""
        return HOLD_READ_LATENCY - 1 + self.ports - 1

    @property
    def judge_flits_per_cycle(self):
        """Flits per cycle a port's back-to-back chunks enter the reduction unit at: 1 at
        :attr:`line_rate`, else ``chunk_flits / (ports × ⌈chunk_flits / ports⌉)`` (each
        chunk waits for the next turn of the judge)."""
        turns = -(-self.chunk_flits // self.ports)
        return self.chunk_flits / (self.ports * turns)

    @property
    def adder_tree_levels(self):
        """Levels of the reduction unit's adder tree over ``ports`` members."""
        return max(1, (self.ports - 1).bit_length())

    @property
    def adder_level_stages(self):
        """Cycles per adder-tree level: :data:`FP_ADD_STAGES` when the unit builds fp32 or
        bf16 adders, else 1 (an int32 level is one registered addition)."""
        return FP_ADD_STAGES if set(self.dtypes) & {"fp32", "bf16"} else 1

    @property
    def reduction_pipeline_depth(self):
        """Engine stages from the bank read's issue to the result select, cycles:
        :attr:`bank_read_latency`, ``adder_level_stages`` per adder-tree level, result
        select."""
        return self.bank_read_latency + self.adder_tree_levels * self.adder_level_stages + 1

    @property
    def result_fifo_flits(self):
        """Result FIFO depth per egress, flits: ``result_fifo_depth`` or pipeline depth + 4."""
        return self.result_fifo_depth or self.reduction_pipeline_depth + 4

    @property
    def result_fifo_storage(self):
        """Where each result FIFO's memory goes: ``"lut"`` (LUT-RAM) when its ``depth - 1``
        stored words fit one column of ECP5 LUT-RAM cells (:data:`LUTRAM_WORDS`), as at every
        int32 default depth, else ``"block"`` (DP16KD). Eight egresses' FIFOs in block RAM
        are 64 DP16KD holding a few words each, whose wiring stops the 8-port unit routing
        (docs/hw.md, "Result FIFOs"); deeper FIFOs (fp trees) would take two columns, about
        twice the 3,555 LUT sites one column costs at 8 × 8, which the fp32 build (96 % full)
        does not have. No cycle depends on it."""
        return one_column_storage(self.result_fifo_flits)

    @property
    def ingress_fifo_storage(self):
        """Where each ingress FIFO's memory goes, by :func:`one_column_storage` (LUT-RAM at
        every default up to ``chunk_flits`` 8). It is a :class:`hw.ramfifo.RamFIFO` (no
        read-during-write bypass) rather than Amaranth's ``SyncFIFOBuffered`` (docs/hw.md,
        "Ingress FIFOs without the bypass"). No cycle depends on it."""
        return one_column_storage(self.ingress_fifo_flits)

    # -- derived: latencies (the RTL's timing, which the fast model reproduces) ---------------

    @property
    def ingress_latency(self):
        """Cycles from a flit entering an ingress FIFO to the FIFO's head."""
        return INGRESS_LATENCY

    @property
    def hold_read_latency(self):
        """Cycles from a contribution flit entering its hold FIFO in the reduction unit to
        the FIFO's head (:data:`HOLD_READ_LATENCY`)."""
        return HOLD_READ_LATENCY

    @property
    def bank_read_latency(self):
        """Cycles from the engine issuing a read to the banks' words at the adder tree's
        leaves (:data:`BANK_READ_LATENCY`)."""
        return BANK_READ_LATENCY

    @property
    def engine_pick_latency(self):
        """Cycles from a chunk's last contribution flit to the engine's first chance to start
        it."""
        return ENGINE_PICK_LATENCY

    @property
    def egress_pick_latency(self):
        """Cycles from a packet's first flit reaching an idle egress arbiter to the arbiter
        presenting it (its registered choice)."""
        return EGRESS_PICK_LATENCY

    @property
    def egress_output_latency(self):
        """Cycles from an egress arbiter's output to the switch's output port (the egress
        stage)."""
        return EGRESS_OUTPUT_LATENCY

    @property
    def egress_latency(self):
        """Cycles an unloaded packet's first flit spends between reaching its egress arbiter
        and leaving the switch: :attr:`egress_pick_latency` + :attr:`egress_output_latency`."""
        return self.egress_pick_latency + self.egress_output_latency

    @property
    def engine_restart_cycles(self):
        """Cycles from the engine reading a chunk's last flit to its first chance to start the
        next chunk: 1 (back to back), or 2 with one-flit chunks. The engine's two-step pick
        works on the slot table of two cycles before and skips only the one slot the engine
        is reading or has just finished; a one-flit chunk is both at once, so the engine rests
        a cycle after it (:mod:`hw.reduce`)."""
        return 2 if self.chunk_flits == 1 else 1

    @property
    def result_latency(self):
        """Cycles from the engine reading a flit of a chunk to its result flit reaching the
        egress arbiters: the reduction pipeline and the result FIFO."""
        return RESULT_FIFO_LATENCY + self.reduction_pipeline_depth

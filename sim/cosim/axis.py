"""cocotb building blocks for AXI4-Stream ports of exported innet blocks.

Small, cycle-driven pieces: :class:`AxisSource` presents packets on one ``s{i}_axis`` port,
:class:`AxisSink` applies backpressure and collects what leaves an ``m_axis`` port. A test calls
``drive()`` just after each rising edge and ``sample()`` in the read-only phase, so a whole
multi-port bench costs two triggers per clock, whatever the port count.

These classes import cocotb lazily (only their methods touch handles), so the module can be
imported outside a simulator for the helpers below.
"""

from hw.packet import LANE_BITS, USER_LAYOUT, encode

__all__ = ["axis_beats", "AxisSource", "AxisSink"]


def axis_beats(packet):
    """The AXI4-Stream beats of ``packet``: ``[(tdata, tuser, tdest, tid, tlast)]`` as ints."""
    user = encode(USER_LAYOUT, packet.header.user())
    beats = []
    for index, words in enumerate(packet.flits):
        tdata = 0
        for lane, word in enumerate(words):
            tdata |= word << (lane * LANE_BITS)
        beats.append((tdata, user, packet.header.dst, packet.header.src,
                      int(index == len(packet.flits) - 1)))
    return beats


def _bind(obj, dut, prefix):
    """Set ``obj.tdata`` … ``obj.tready`` to the handles of ``{prefix}_t*`` on ``dut``."""
    for signal in ("tdata", "tuser", "tdest", "tid", "tlast", "tvalid", "tready"):
        setattr(obj, signal, getattr(dut, f"{prefix}_{signal}"))


class AxisSource:
    """Presents packets on ``{prefix}_t*`` flit by flit.

    Parameters
    ----------
    dut : cocotb handle
    prefix : str
        e.g. ``"s0_axis"``.
    rng : random.Random
    idle : float
        Probability of leaving ``tvalid`` low for a cycle before presenting the next flit.
    """

    def __init__(self, dut, prefix, rng, idle=0.0):
        _bind(self, dut, prefix)
        self.rng, self.idle = rng, idle
        self.beats = []
        self.pos = 0
        self.valid = False
        self.ready = False

    def send(self, packet):
        self.beats.extend(axis_beats(packet))

    @property
    def done(self):
        return self.pos >= len(self.beats)

    @property
    def last(self):
        """``tlast`` of the flit presented now."""
        return self.valid and bool(self.beats[self.pos][4])

    def drive(self):
        """Just after a rising edge: retire an accepted flit, present the next one."""
        if self.valid and self.ready:
            self.pos += 1
            self.valid = False
        if not self.valid and not self.done:
            if self.idle == 0 or self.rng.random() >= self.idle:
                tdata, tuser, tdest, tid, tlast = self.beats[self.pos]
                self.tdata.value = tdata
                self.tuser.value = tuser
                self.tdest.value = tdest
                self.tid.value = tid
                self.tlast.value = tlast
                self.valid = True
        self.tvalid.value = int(self.valid)

    def sample(self):
        """In the read-only phase: will the presented flit be accepted at the next edge?"""
        self.ready = bool(self.tready.value)
        return self.valid and self.ready


class AxisSink:
    """Applies backpressure on ``{prefix}_tready`` and collects accepted beats.

    Parameters
    ----------
    stall : float
        Probability of holding ``tready`` low for a cycle.
    """

    def __init__(self, dut, prefix, rng, stall=0.0):
        _bind(self, dut, prefix)
        self.rng, self.stall = rng, stall
        self.ready = True
        self.beats = []

    def drive(self):
        self.ready = self.stall == 0 or self.rng.random() >= self.stall
        self.tready.value = int(self.ready)

    def sample(self):
        """In the read-only phase: ``(valid, beat or None)``; the beat is recorded if accepted."""
        if not self.tvalid.value:
            return False, None
        beat = (int(self.tdata.value), int(self.tuser.value), int(self.tdest.value),
                int(self.tid.value), int(self.tlast.value))
        if self.ready:
            self.beats.append(beat)
        return True, beat

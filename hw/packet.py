"""The one definition of innet's flit and packet formats.

A *packet* is a run of one or more *flits* on a stream; the flit whose ``last`` bit is set ends
it. Every flit carries the whole header, so that any block (arbiter, crossbar, reduction unit)
can act on a flit without keeping per-packet state from the first flit, and so that the
header maps onto the AXI4-Stream side-band signals one-to-one:

======================  =====================  ============================================
flit field              AXI4-Stream signal     meaning
======================  =====================  ============================================
``data[L]`` (L × 32)    ``tdata``              payload lanes, lane 0 in the low bits
``last``                ``tlast``              this flit ends the packet
``src``                 ``tid``                source port (the GPU that sent the packet)
``dst``                 ``tdest``              destination port
``user.kind``           ``tuser``              :class:`Kind`
``user.dtype``          ``tuser``              :class:`DType` of the payload elements
``user.job``            ``tuser``              job (tenant / reduction group) id
``user.slot``           ``tuser``              reduction slot, or memory tag
``user.seq``            ``tuser``              chunk sequence number, or memory sequence
======================  =====================  ============================================

Bit positions come from the :mod:`amaranth.lib.data` layouts below and nowhere else: the RTL
uses the layouts as shapes, and the Python helpers (:func:`encode`, :func:`decode`,
:func:`packet_to_flits`, …) read offsets and widths from the same layouts. ``docs/packet-format.md``
is generated from them (``innet export layout``).

This module imports Amaranth only; numpy arrays are accepted wherever a sequence of lane words is
(they are converted element by element).
"""

from dataclasses import dataclass, replace
from functools import lru_cache

from amaranth.hdl import Shape
from amaranth.lib import data, enum

from .errors import check_int

__all__ = [
    "LANE_BITS", "PORT_BITS", "JOB_BITS", "SLOT_BITS", "SEQ_BITS", "MAX_PORTS",
    "Kind", "DType", "USER_LAYOUT", "flit_layout",
    "Header", "Packet", "encode", "decode", "field_table",
    "pack_flit", "unpack_flit", "packet_to_flits", "flits_to_packets",
]

#: Width of one payload lane, bits.
LANE_BITS = 32
#: Width of a port number (``src``, ``dst``; AXI ``tid``, ``tdest``): up to 64 ports, the port
#: count of an NVSwitch gen3.
PORT_BITS = 6
MAX_PORTS = 1 << PORT_BITS
#: Width of a job id: up to 256 concurrent jobs (tenants) per switch.
JOB_BITS = 8
#: Width of a slot id: up to 65536 reduction slots (SwitchML uses 8192).
SLOT_BITS = 16
#: Width of a chunk sequence number.
SEQ_BITS = 16


class Kind(enum.Enum, shape=3):
    """What a packet is. The switch routes on it: memory kinds by ``dst``, reduction
    contributions to the reduction unit, configuration to the configuration port."""

    MEM_WRITE = 0
    MEM_READ_REQ = 1
    MEM_READ_RESP = 2
    REDUCE_CONTRIB = 3
    REDUCE_RESULT = 4
    CONFIG = 5
    #: Only the switch sends this: the tail flit with which it ends a packet its sender
    #: truncated (no ``last`` before the next packet's header). Discard the whole packet.
    NULLIFIED = 6


class DType(enum.Enum, shape=2):
    """Element type of the payload. ``INT32`` and ``FP32`` put one element in each 32-bit lane;
    ``BF16`` puts two, element ``2k`` in bits 0–15 of lane ``k`` and ``2k+1`` in bits 16–31."""

    INT32 = 0
    FP32 = 1
    BF16 = 2


#: The header fields that travel on AXI4-Stream ``tuser``.
USER_LAYOUT = data.StructLayout({
    "kind":  Kind,
    "dtype": DType,
    "job":   JOB_BITS,
    "slot":  SLOT_BITS,
    "seq":   SEQ_BITS,
})


@lru_cache(maxsize=None)
def flit_layout(lanes):
    """Layout of one flit with ``lanes`` 32-bit payload lanes.

    Raises
    ------
    hw.errors.ParameterError
        If ``lanes`` is not an integer of at least 1 (a ``TypeError`` too if it is not an
        integer).
    """
    check_int("Lane count", lanes, 1, parameter="lanes")
    return data.StructLayout({
        "data": data.ArrayLayout(LANE_BITS, lanes),
        "last": 1,
        "src":  PORT_BITS,
        "dst":  PORT_BITS,
        "user": USER_LAYOUT,
    })


# -- Generic layout codec (Python ints) -------------------------------------------------------

# Layouts are immutable, so their widths and fields are worked out once: the co-simulation
# encodes a tuser per packet, and Shape.cast on every field was most of that cost.
_WIDTHS = {}
_FIELDS = {}


def _width(shape):
    width = _WIDTHS.get(shape)
    if width is None:
        width = shape.size if isinstance(shape, data.Layout) else Shape.cast(shape).width
        _WIDTHS[shape] = width
    return width


def _fields(layout):
    """``{name: (shape, offset)}`` of a struct layout."""
    fields = _FIELDS.get(layout)
    if fields is None:
        fields = _FIELDS[layout] = {name: (f.shape, f.offset) for name, f in layout}
    return fields


def encode(layout, value):
    """Pack ``value`` (nested dicts for structs, sequences for arrays, ints or enum members for
    leaves) into an integer laid out as ``layout``. Missing struct fields are zero.

    Raises
    ------
    ValueError
        If a leaf value does not fit its field.
    """
    if isinstance(layout, data.StructLayout):
        fields = _fields(layout)
        unknown = value.keys() - fields.keys()
        if unknown:
            raise ValueError(f"Unknown field(s) {sorted(unknown)}")
        bits = 0
        for name, field_value in value.items():
            shape, offset = fields[name]
            bits |= encode(shape, field_value) << offset
        return bits
    if isinstance(layout, data.ArrayLayout):
        if len(value) != layout.length:
            raise ValueError(f"Expected {layout.length} elements, got {len(value)}")
        width = _width(layout.elem_shape)
        bits = 0
        for index, elem in enumerate(value):
            bits |= encode(layout.elem_shape, elem) << (index * width)
        return bits
    if isinstance(layout, type) and issubclass(layout, enum.Enum):
        # A bare number may name no member: malformed packets are built on purpose.
        value = value.value if isinstance(value, layout) else value
    value = int(value)
    width = _width(layout)
    if not 0 <= value < (1 << width):
        raise ValueError(f"Value {value} does not fit in {width} bits")
    return value


def decode(layout, bits):
    """Inverse of :func:`encode`: unpack an integer into nested dicts / lists / ints / enums."""
    bits = int(bits)
    if isinstance(layout, data.StructLayout):
        return {name: decode(field.shape, bits >> field.offset) for name, field in layout}
    if isinstance(layout, data.ArrayLayout):
        width = _width(layout.elem_shape)
        return [decode(layout.elem_shape, bits >> (i * width)) for i in range(layout.length)]
    raw = bits & ((1 << _width(layout)) - 1)
    if isinstance(layout, type) and issubclass(layout, enum.Enum):
        try:
            return layout(raw)
        except ValueError:
            return raw  # an encoding with no name (e.g. a malformed kind): keep the number
    return raw


def field_table(layout, prefix=""):
    """Flatten a layout into ``[{"name", "offset", "width"}]`` rows, leaves only, dotted names.
    Arrays are one row (``data`` with ``count`` and ``elem_width``)."""
    rows = []
    for name, field in layout:
        full = f"{prefix}{name}"
        if isinstance(field.shape, data.StructLayout):
            for row in field_table(field.shape, f"{full}."):
                rows.append({**row, "offset": row["offset"] + field.offset})
        elif isinstance(field.shape, data.ArrayLayout):
            rows.append({"name": full, "offset": field.offset, "width": field.shape.size,
                         "count": field.shape.length,
                         "elem_width": _width(field.shape.elem_shape)})
        else:
            row = {"name": full, "offset": field.offset, "width": _width(field.shape)}
            if isinstance(field.shape, type) and issubclass(field.shape, enum.Enum):
                row["values"] = {member.name: member.value for member in field.shape}
            rows.append(row)
    return rows


# -- Packets ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Header:
    """A packet header. Every flit of a packet carries it unchanged.

    Raises
    ------
    ValueError
        If a field does not fit its width in the flit layout.
    """

    kind: Kind
    src: int
    dst: int
    job: int = 0
    slot: int = 0
    seq: int = 0
    dtype: DType = DType.INT32

    def __post_init__(self):
        object.__setattr__(self, "kind", Kind(self.kind))
        object.__setattr__(self, "dtype", DType(self.dtype))
        for name, width in (("src", PORT_BITS), ("dst", PORT_BITS), ("job", JOB_BITS),
                            ("slot", SLOT_BITS), ("seq", SEQ_BITS)):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < (1 << width):
                raise ValueError(f"Header field {name} must be an integer in "
                                 f"[0, {(1 << width) - 1}], not {value!r}")

    def user(self):
        """The header fields that travel on ``tuser``, as a dict for :data:`USER_LAYOUT`."""
        return {"kind": self.kind, "dtype": self.dtype, "job": self.job,
                "slot": self.slot, "seq": self.seq}


@dataclass(frozen=True)
class Packet:
    """A header and its payload: ``flits`` is a tuple of flits, each a tuple of lane words
    (unsigned 32-bit ints). A numpy array of shape ``(n_flits, lanes)`` is accepted."""

    header: Header
    flits: tuple

    def __post_init__(self):
        flits = self.flits.tolist() if hasattr(self.flits, "tolist") else self.flits
        flits = tuple(tuple(int(word) for word in flit) for flit in flits)
        if not flits:
            raise ValueError("A packet has at least one flit")
        lanes = len(flits[0])
        for flit in flits:
            if len(flit) != lanes:
                raise ValueError("Every flit of a packet must have the same number of lanes")
            for word in flit:
                if not 0 <= word < (1 << LANE_BITS):
                    raise ValueError(f"Lane word {word} does not fit in {LANE_BITS} bits")
        object.__setattr__(self, "flits", flits)

    @property
    def lanes(self):
        return len(self.flits[0])

    def __len__(self):
        return len(self.flits)


def pack_flit(header, words, last):
    """Bits of one flit (an int laid out as ``flit_layout(len(words))``)."""
    layout = flit_layout(len(words))
    return encode(layout, {"data": list(words), "last": int(bool(last)), "src": header.src,
                           "dst": header.dst, "user": header.user()})


def unpack_flit(lanes, bits):
    """Inverse of :func:`pack_flit`: ``(header, words, last)``.

    Raises
    ------
    ValueError
        If the kind or dtype field holds an encoding with no name.
    """
    fields = decode(flit_layout(lanes), bits)
    user = fields["user"]
    header = Header(kind=user["kind"], dtype=user["dtype"], src=fields["src"],
                    dst=fields["dst"], job=user["job"], slot=user["slot"], seq=user["seq"])
    return header, tuple(fields["data"]), bool(fields["last"])


def packet_to_flits(packet):
    """The flits of ``packet`` as ints, ``last`` set on the final one."""
    count = len(packet.flits)
    return [pack_flit(packet.header, words, index == count - 1)
            for index, words in enumerate(packet.flits)]


def flits_to_packets(lanes, flit_bits):
    """Group a stream of flit ints into packets. A packet the switch ended with a
    ``NULLIFIED`` tail (its sender truncated it) comes back with kind ``NULLIFIED`` and the
    flits before the tail.

    Raises
    ------
    ValueError
        If the header changes inside a packet, or the stream ends without ``last``.
    """
    packets, current, header = [], [], None
    for bits in flit_bits:
        flit_header, words, last = unpack_flit(lanes, bits)
        if header is not None and last and flit_header.kind == Kind.NULLIFIED and \
                header.kind != Kind.NULLIFIED and replace(flit_header, kind=header.kind) == header:
            packets.append(Packet(flit_header, tuple(current)))
            current, header = [], None
            continue
        if header is not None and flit_header != header:
            raise ValueError(f"Header changed inside a packet: {header} then {flit_header}")
        header = flit_header
        current.append(words)
        if last:
            packets.append(Packet(header, tuple(current)))
            current, header = [], None
    if current:
        raise ValueError(f"Stream ended inside a packet ({len(current)} flit(s) without last)")
    return packets

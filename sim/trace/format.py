"""The innet GPU trace format, versions 3 and 4: the one definition (docs/trace-format.md).

A trace holds, per GPU, compute kernel records, memory-traffic records (remote reads and writes
through the switch) and gradient message records (collective traffic with its dependencies).

Binary form (``.itr``), versions 2 to 4, little endian::

    0      8 bytes  magic b"INNETTRC"
    8      u16      version (3, or 4 when a record has wait records; 2 reads the same)
    10     u16      reserved (0)
    12     u32      L, length of the metadata, bytes
    16     u32      B, records per block (:data:`BLOCK_RECORDS` when written here)
    20     u64      R, number of records
    28     u32      CRC-32 of bytes 0-27 (the header)
    32     L bytes  metadata: UTF-8 JSON object; "gpus" (int ≥ 1) is required
    32+L   u32      CRC-32 of the metadata
    36+L   blocks   ceil(R / B) blocks: B records (the last block: the rest), 32 bytes each in the
                    layout RECORD (below), then the u32 CRC-32 of those records' bytes;
                    the file ends exactly after the last block

Version 3 is version 2's layout with the nodes of a multi-node cluster: the metadata may name
``nodes``, ``gpus_per_node`` and ``nodes_per_leaf`` (ranks are numbered node by node), a mem
or grad record's ``op`` holds its route in bits 4-7 (:data:`ROUTES`: the links it crosses;
0, ``nvlink``, inside the node), a grad record may go to the InfiniBand switches' reduction
(peer :data:`IB_SWITCH_PORT`) with algorithm ``sharp``. Each route is checked against the
nodes of its two ends. A version-2 reader refuses a version-3 file by its version number.

Version 4 is version 3 with one more record type, ``wait`` (type 4, :data:`WAIT`): it follows
a mem or grad record (or another wait of that record) and adds one more dependency to it, so
that a message may wait for several (a tree's parent for both of its children). Its ``gpu`` and
``id`` repeat those of the record it extends, ``b`` names the dependency (an earlier record),
every other field is 0; the record it extends must have a dependency of its own in ``b``. The
writer writes version 3, byte for byte as before, when no record has more than one dependency,
and version 4 only when one has; readers fold the wait records into the record they extend
(:attr:`TraceRecord.dependencies`), so no consumer sees a wait record.

A mem record's ``aux`` field holds its traffic class (:data:`TRAFFIC`, low 8 bits) and whether
backprop waits on it (bit 15, :data:`CRITICAL`). Older writers left it 0 (traffic ``other``,
not critical), so the layout and the version number are unchanged: every trace written before
reads as it did (docs/trace-format.md, "Versions").

CRC-32 is ``zlib.crc32`` (ISO-HDLC, the CRC of zip and PNG). Every byte of a version-2 file is
under a checksum or is one, and a file that ends early or late is refused: a change of up to
four consecutive bytes is always detected, larger damage all but once in 2^32. Version 1
(still read, no longer written) has a 16-byte header (magic, version, reserved, L), the
metadata, and the records to the end of the file, with no checksums.

Text form (``.txt``): a first line ``innet-trace 3 <metadata JSON>``, then one record per line,
``<type> key=value ...`` with the keys of that type (blank lines and ``#`` comments allowed).
It carries no checksums (it is made to be read and edited by hand); readers accept version 1,
2, 3 and 4 headers, whose text forms are the same (mem records take the optional keys
``traffic`` and ``critical``; in version 3 mem and grad records take ``route``, and a grad
record's peer may be ``ibswitch``; version 4 adds ``wait gpu=G id=I dep=D`` lines).

Code outside this module reads a record through the accessors named by meaning on
:class:`TraceRecord` (``bytes``, ``dependency``, ``bucket``, ``chunk``, ``duration_ns``, ...)
and builds one with :meth:`TraceRecord.kernel`, :meth:`TraceRecord.mem` or
:meth:`TraceRecord.grad`; only this module knows which raw field holds what.

Readers stream: :func:`read_trace` yields records one at a time (in the binary form, a block
at a time once its checksum matched) and validates each as it goes, raising
:class:`TraceError` with ``file:record: field: problem`` (record = 1-based record number; in
the text form, the line number; 0 for the header and metadata), or
``file:record: checksum mismatch (records A-B)`` for a corrupted block (record = A, the
block's first).
"""

import json
import os
import struct
import tempfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

from sim.errors import InputError
from sim.files import current_umask

__all__ = ["ALGOS", "BLOCK_RECORDS", "CRITICAL", "GRAD", "IB_SWITCH_PORT", "KERNEL", "MAGIC", "MEM",
           "MEM_OPS", "NO_DEP", "PHASES", "READ_VERSIONS", "RECORD", "ROUTES", "ROUTE_LINKS",
           "SWITCH_PORT", "TRAFFIC", "VERSION", "WAIT", "WAIT_VERSION", "TraceError",
           "TraceRecord", "read_trace", "route_of", "trace_summary", "write_trace"]

#: the version written when no record has more than one dependency; WAIT_VERSION: the version
#: written when one has (its wait records); READ_VERSIONS: the versions read
VERSION = 3
WAIT_VERSION = 4
READ_VERSIONS = (1, 2, 3, 4)
MAGIC = b"INNETTRC"
#: records per checksummed block, as written (128 KiB of records)
BLOCK_RECORDS = 4096
#: the most records per block a reader accepts (a block is read whole: 32 MiB)
MAX_BLOCK_RECORDS = 1 << 20
#: version 1: magic, version, reserved, metadata length
_HEADER_V1 = struct.Struct("<8sHHI")
#: version 2: magic, version, reserved, metadata length, records per block, records; its CRC
_HEADER = struct.Struct("<8sHHIIQ")
_CRC = struct.Struct("<I")
assert _HEADER.size + _CRC.size == 32
#: rtype, op, gpu, peer, job, slot, aux, id, time_ns, a, b
RECORD = struct.Struct("<BBHHHHHIQII")
assert RECORD.size == 32

KERNEL, MEM, GRAD, WAIT = 1, 2, 3, 4
TYPE_NAMES = {KERNEL: "kernel", MEM: "mem", GRAD: "grad", WAIT: "wait"}
NO_DEP = 0xFFFFFFFF
#: peer of a grad record: the node's NVSwitch (an in-switch contribution)
SWITCH_PORT = 0xFFFF
#: peer of a grad record (version 3, multi-node traces): the InfiniBand switches' in-network
#: reduction (SHARP), reached over the sender's PCIe path and NIC
IB_SWITCH_PORT = 0xFFFE
PHASES = ("fwd", "bwd", "opt", "comm", "other")
MEM_OPS = ("read", "write")
#: ``sharp`` (index 5) is version 3's: the multi-node all-reduce through the InfiniBand switches
ALGOS = ("ring", "tree", "direct", "inswitch", "p2p", "sharp")
_ALGOS_V2 = 5
#: A mem or grad record's route (version 3: bits 4-7 of ``op``; the low 4 bits are the type's
#: ``op``): the links it crosses, named by them. 0, ``nvlink``, is through the node's NVSwitch,
#: what every message of a one-node trace (and of versions 1 and 2) takes. The other routes
#: leave the node: GPU -> PCIe switch -> NIC -> leaf switch [-> spine -> leaf] -> NIC -> PCIe
#: switch -> GPU, or up to the InfiniBand switch that reduces (``IB_SWITCH_PORT``) at the leaf
#: or, when the nodes hang off several leaves, at a spine; the sum comes back the same links.
ROUTES = ("nvlink", "pcie-nic-leaf-nic-pcie", "pcie-nic-leaf-spine-leaf-nic-pcie",
          "pcie-nic-leaf", "pcie-nic-leaf-spine")
#: route name -> the links it crosses, in order
ROUTE_LINKS = {name: tuple(name.split("-")) for name in ROUTES}
_OP_MASK, _ROUTE_SHIFT = 0x0F, 4
#: A mem record's traffic class (low 8 bits of ``aux``): ``pp`` pipeline-stage
#: activations and activation gradients, ``tp`` tensor-parallel all-reduce, ``fsdp`` sharded
#: parameter all-gather, ``offload`` host-memory offload, ``other`` anything else.
TRAFFIC = ("other", "pp", "tp", "fsdp", "offload")
#: Bit of a mem record's ``aux``: backprop waits on this message.
CRITICAL = 0x8000

# Text keys per record type, in order: (key, record attribute).
_TEXT_KEYS = {
    KERNEL: [("gpu", "gpu"), ("id", "id"), ("start_ns", "time_ns"), ("dur_ns", "a"),
             ("sms", "aux"), ("hbm_kib", "b"), ("phase", "op"), ("job", "job")],
    MEM: [("gpu", "gpu"), ("peer", "peer"), ("id", "id"), ("time_ns", "time_ns"),
          ("bytes", "a"), ("op", "op"), ("tag", "slot"), ("dep", "b"), ("job", "job"),
          ("traffic", "aux"), ("critical", "aux"), ("route", "op")],
    GRAD: [("gpu", "gpu"), ("peer", "peer"), ("id", "id"), ("time_ns", "time_ns"),
           ("bytes", "a"), ("job", "job"), ("slot", "slot"), ("chunk", "aux"), ("dep", "b"),
           ("algo", "op"), ("route", "op")],
    WAIT: [("gpu", "gpu"), ("id", "id"), ("dep", "b")],
}
_ENUMS = {(KERNEL, "op"): PHASES, (MEM, "op"): MEM_OPS, (GRAD, "op"): ALGOS}
_LIMITS = {"op": 0xFF, "gpu": 0xFFFF, "peer": 0xFFFF, "job": 0xFFFF, "slot": 0xFFFF,
           "aux": 0xFFFF, "id": 0xFFFFFFFF, "time_ns": 2**64 - 1, "a": 0xFFFFFFFF,
           "b": 0xFFFFFFFF}


def _enum_index(names, field, name):
    if name not in names:
        raise ValueError(f"{field}: {name!r} is not one of {', '.join(names)}")
    return names.index(name)


def _dep_field(dependency):
    return NO_DEP if dependency is None else dependency


def _dep_fields(dependencies):
    """A mem or grad record's ``b`` and ``waits`` for a tuple of record ids."""
    return (dependencies[0] if dependencies else NO_DEP), dependencies[1:]


def _route_bits(route):
    return _enum_index(ROUTES, "route", route) << _ROUTE_SHIFT


def route_of(links):
    """The route name (one of :data:`ROUTES`) of a sequence of links, e.g.
    ``("pcie", "nic", "leaf", "nic", "pcie")``; ``()`` and ``("nvlink",)`` are ``nvlink``.

    Raises
    ------
    ValueError
        For links no route crosses."""
    name = "-".join(links) or "nvlink"
    if name not in ROUTE_LINKS:
        raise ValueError(f"no route crosses {name!r}; routes: {', '.join(ROUTES)}")
    return name


@dataclass(frozen=True)
class TraceRecord:
    """One trace record: the 32-byte layout :data:`RECORD`, field for field.

    The raw fields (``rtype``, ``op``, ``gpu``, ``peer``, ``job``, ``slot``, ``aux``, ``id``,
    ``time_ns``, ``a``, ``b``) are the wire format; what ``op``, ``slot``, ``aux``, ``a`` and
    ``b`` mean depends on the record type (docs/trace-format.md). Code outside this module
    reads records through the accessors named by meaning and builds them with
    :meth:`kernel`, :meth:`mem` and :meth:`grad`:

    ========================  ==========  ==========  =====================================
    accessor                  kernel      mem         grad
    ========================  ==========  ==========  =====================================
    ``start_ns``              ``time_ns``
    ``duration_ns``           ``a``
    ``end_ns``                start + duration
    ``sms``                   ``aux``
    ``hbm_kib``               ``b``
    ``phase``                 ``op``
    ``bytes``                             ``a``       ``a``
    ``dependency``                        ``b``       ``b``
    ``tag``                               ``slot``
    ``mem_op``                            ``op`` (bits 0-3)
    ``bucket``                                        ``slot``
    ``chunk``                                         ``aux``
    ``traffic``                           ``aux``
    ``critical``                          ``aux``
    ``algo``                                          ``op`` (bits 0-3)
    ``to_switch``                                     ``peer == SWITCH_PORT``
    ``to_ib_switch``                                  ``peer == IB_SWITCH_PORT``
    ``route``, ``links``                  ``op`` (bits 4-7, version 3)
    ========================  ==========  ==========  =====================================

    An accessor read on a record type it does not apply to raises :class:`TypeError` (a
    kernel has no byte count; a grad record has no duration), so a consumer never reads a
    field of another type by mistake.

    ``waits`` is not a field of the layout: a mem or grad record's dependencies after the
    first (``b``), each written as a ``wait`` record after it (version 4). Read them all
    through :attr:`dependencies`; set them with :meth:`with_dependencies`.
    """

    rtype: int
    op: int = 0
    gpu: int = 0
    peer: int = 0
    job: int = 0
    slot: int = 0
    aux: int = 0
    id: int = 0
    time_ns: int = 0
    a: int = 0
    b: int = 0
    waits: tuple = ()

    # -- constructors named by meaning ------------------------------------------------------

    @classmethod
    def kernel(cls, *, gpu, id, start_ns, duration_ns, phase="fwd", sms=0, hbm_kib=0, job=0):
        """A compute or collective kernel on ``gpu``: ``start_ns`` and ``duration_ns`` in ns,
        ``phase`` one of :data:`PHASES`, ``sms`` SMs used, ``hbm_kib`` HBM traffic in KiB
        (2^10 bytes)."""
        return cls(KERNEL, op=_enum_index(PHASES, "phase", phase), gpu=gpu, id=id,
                   time_ns=start_ns, a=duration_ns, aux=sms, b=hbm_kib, job=job)

    @classmethod
    def mem(cls, *, gpu, peer, id, time_ns, bytes, op="write", tag=0, dependency=None, job=0,
            traffic="other", critical=False, route="nvlink"):
        """A remote ``read`` or ``write`` (``op``, one of :data:`MEM_OPS`) of ``bytes`` bytes
        from ``gpu`` to GPU ``peer``, issued at ``time_ns``; it waits for record
        ``dependency`` (a record id, or ``None``). ``traffic`` is its class (one of
        :data:`TRAFFIC`); ``critical``: backprop waits on it; ``route`` (one of
        :data:`ROUTES`) the links it crosses."""
        aux = _enum_index(TRAFFIC, "traffic", traffic) | (CRITICAL if critical else 0)
        return cls(MEM, op=_enum_index(MEM_OPS, "op", op) | _route_bits(route), gpu=gpu,
                   peer=peer, id=id,
                   time_ns=time_ns, a=bytes, slot=tag, b=_dep_field(dependency), job=job,
                   aux=aux)

    @classmethod
    def grad(cls, *, gpu, peer, id, time_ns, bytes, algo, bucket=0, chunk=0, dependency=None,
             job=0, route="nvlink", dependencies=()):
        """A gradient message piece of ``bytes`` bytes from ``gpu`` to GPU ``peer`` (or
        :data:`SWITCH_PORT`: an in-switch contribution; :data:`IB_SWITCH_PORT`: a contribution
        to the InfiniBand switches' reduction), issued at ``time_ns``, of collective ``algo``
        (one of :data:`ALGOS`), bucket (switch slot) ``bucket`` and piece ``chunk``, crossing
        ``route`` (one of :data:`ROUTES`); it waits for record ``dependency`` (a record id, or
        ``None``), or for every record of ``dependencies`` (ids), not both. (The trace
        generator makes millions of these: one construction, not one and a copy.)"""
        if dependency is not None and dependencies:
            raise ValueError("give dependency or dependencies, not both")
        b, waits = _dep_fields((dependency,) if dependency is not None else tuple(dependencies))
        return cls(GRAD, op=_enum_index(ALGOS, "algo", algo) | _route_bits(route), gpu=gpu,
                   peer=peer, id=id, time_ns=time_ns, a=bytes, slot=bucket, aux=chunk, b=b,
                   waits=waits, job=job)

    def with_dependency(self, dependency):
        """This mem or grad record waiting for record ``dependency`` instead (``None``:
        nothing)."""
        return self.with_dependencies(() if dependency is None else (dependency,))

    def with_dependencies(self, dependencies):
        """This mem or grad record waiting for every record of ``dependencies`` (record ids;
        empty: nothing) instead."""
        self._require((MEM, GRAD), "dependencies")
        b, waits = _dep_fields(tuple(dependencies))
        # (field by field: dataclasses.replace takes twice as long, and the replay's window
        # cut calls this for every piece it keeps)
        return TraceRecord(self.rtype, op=self.op, gpu=self.gpu, peer=self.peer, job=self.job,
                           slot=self.slot, aux=self.aux, id=self.id, time_ns=self.time_ns,
                           a=self.a, b=b, waits=waits)

    # -- accessors named by meaning ---------------------------------------------------------

    def _require(self, types, accessor):
        if self.rtype not in types:
            kinds = " and ".join(TYPE_NAMES[t] for t in types)
            raise TypeError(f"a {TYPE_NAMES.get(self.rtype, self.rtype)} record has no "
                            f"{accessor} (only {kinds} records do)")

    @property
    def start_ns(self):
        """Kernel: start time, ns."""
        self._require((KERNEL,), "start_ns")
        return self.time_ns

    @property
    def duration_ns(self):
        """Kernel: duration, ns."""
        self._require((KERNEL,), "duration_ns")
        return self.a

    @property
    def end_ns(self):
        """Kernel: end time (start + duration), ns."""
        self._require((KERNEL,), "end_ns")
        return self.time_ns + self.a

    @property
    def sms(self):
        """Kernel: SMs it used."""
        self._require((KERNEL,), "sms")
        return self.aux

    @property
    def hbm_kib(self):
        """Kernel: HBM traffic, KiB (2^10 bytes)."""
        self._require((KERNEL,), "hbm_kib")
        return self.b

    @property
    def phase(self):
        """Kernel: its phase, one of :data:`PHASES`."""
        self._require((KERNEL,), "phase")
        return PHASES[self.op]

    @property
    def bytes(self):
        """Mem and grad: payload size, bytes."""
        self._require((MEM, GRAD), "bytes")
        return self.a

    @property
    def dependency(self):
        """Mem and grad: id of the record this one waits for, or ``None``.

        Raises
        ------
        ValueError
            For a record that waits for more than one (read :attr:`dependencies`)."""
        self._require((MEM, GRAD), "dependency")
        if self.waits:
            raise ValueError(f"record {self.id} waits for {1 + len(self.waits)} records: "
                             f"read its dependencies")
        return None if self.b == NO_DEP else self.b

    @property
    def dependencies(self):
        """Mem and grad: ids of the records this one waits for (a tuple, empty for none)."""
        self._require((MEM, GRAD), "dependencies")
        return () if self.b == NO_DEP else (self.b, *self.waits)

    @property
    def tag(self):
        """Mem: the requester's tag."""
        self._require((MEM,), "tag")
        return self.slot

    @property
    def mem_op(self):
        """Mem: ``"read"`` or ``"write"``."""
        self._require((MEM,), "mem_op")
        return MEM_OPS[self.op & _OP_MASK]

    @property
    def traffic(self):
        """Mem: its traffic class, one of :data:`TRAFFIC` (``other`` if the writer set none)."""
        self._require((MEM,), "traffic")
        return TRAFFIC[self.aux & 0xFF]

    @property
    def critical(self):
        """Mem: whether backprop waits on this message (False if the writer set none)."""
        self._require((MEM,), "critical")
        return bool(self.aux & CRITICAL)

    @property
    def bucket(self):
        """Grad: the gradient bucket, which is also the switch slot of in-switch pieces."""
        self._require((GRAD,), "bucket")
        return self.slot

    @property
    def chunk(self):
        """Grad: the piece's number within its bucket; the in-switch pieces with equal
        (``bucket``, ``chunk``) on every member are reduced together."""
        self._require((GRAD,), "chunk")
        return self.aux

    @property
    def algo(self):
        """Grad: the collective algorithm, one of :data:`ALGOS`."""
        self._require((GRAD,), "algo")
        return ALGOS[self.op & _OP_MASK]

    @property
    def to_switch(self):
        """Grad: whether the piece is an in-switch contribution (``peer`` is the switch)."""
        self._require((GRAD,), "to_switch")
        return self.peer == SWITCH_PORT

    @property
    def to_ib_switch(self):
        """Grad: whether the piece is a contribution to the InfiniBand switches' reduction
        (SHARP; ``peer`` is :data:`IB_SWITCH_PORT`)."""
        self._require((GRAD,), "to_ib_switch")
        return self.peer == IB_SWITCH_PORT

    @property
    def route(self):
        """Mem and grad: the route, one of :data:`ROUTES` (``nvlink`` in versions 1 and 2)."""
        self._require((MEM, GRAD), "route")
        return ROUTES[self.op >> _ROUTE_SHIFT]

    @property
    def links(self):
        """Mem and grad: the links the message crosses, in order (:data:`ROUTE_LINKS`)."""
        return ROUTE_LINKS[self.route]

    # -- encoding ---------------------------------------------------------------------------

    def wire(self):
        """The records of the file this one is: itself, then a wait record per dependency
        after its first."""
        if not self.waits:
            return (self,)
        return (replace(self, waits=()),
                *(TraceRecord(WAIT, gpu=self.gpu, id=self.id, b=d) for d in self.waits))

    def pack(self):
        """The 32-byte layout of this record and of its wait records."""
        return b"".join(RECORD.pack(r.rtype, r.op, r.gpu, r.peer, r.job, r.slot, r.aux, r.id,
                                    r.time_ns, r.a, r.b) for r in self.wire())

    def to_text(self):
        """The text lines of this record and of its wait records."""
        return "\n".join(r._line() for r in self.wire())

    def _line(self):
        name = TYPE_NAMES[self.rtype]
        parts = [name]
        for key, attr in _TEXT_KEYS[self.rtype]:
            value = getattr(self, attr)
            if key == "route":
                if not value >> _ROUTE_SHIFT:
                    continue   # nvlink: the default, as versions 1 and 2 wrote it
                value = ROUTES[value >> _ROUTE_SHIFT]
            elif (self.rtype, attr) in _ENUMS:
                names = _ENUMS[(self.rtype, attr)]
                value = names[value & _OP_MASK if self.rtype in (MEM, GRAD) else value]
            elif attr == "b" and key == "dep":
                value = "none" if value == NO_DEP else value
            elif attr == "peer" and value == SWITCH_PORT:
                value = "switch"
            elif attr == "peer" and value == IB_SWITCH_PORT and self.rtype == GRAD:
                value = "ibswitch"
            elif self.rtype == MEM and key == "traffic":
                if value & 0xFF == 0:
                    continue   # "other": the default, as version 2 wrote it
                value = TRAFFIC[value & 0xFF]
            elif self.rtype == MEM and key == "critical":
                if not value & CRITICAL:
                    continue
                value = 1
            parts.append(f"{key}={value}")
        return " ".join(parts)


class TraceError(InputError, ValueError):
    """A trace failed to load: the message is ``file:record: field: problem``."""


def _where(path, index, field, problem):
    return TraceError(f"{path}:{index}: {field}: {problem}")


def _meta_int(meta, key):
    value = meta.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Validator:
    """Checks records one by one against the rules of ``version`` and the trace's metadata
    (its GPUs; in version 3, its nodes, which fix every message's route)."""

    def __init__(self, path, meta, version=VERSION):
        self.path = path
        self.gpus = meta["gpus"]
        self.ids = set()
        self.version = version
        self.algos = ALGOS if version >= 3 else ALGOS[:_ALGOS_V2]
        self.nodes = meta.get("nodes", 1) if version >= 3 else 1
        self.per_node = meta.get("gpus_per_node", self.gpus) if self.nodes > 1 else self.gpus
        self.per_leaf = meta.get("nodes_per_leaf", 1) if self.nodes > 1 else 1
        self.extends = None   # the mem or grad record a wait record may follow, or None
        self.waits = 0        # wait records checked

    def expected_route(self, src, dst):
        """The route from GPU ``src`` to GPU ``dst`` (or to a switch) in this trace's nodes."""
        if dst == SWITCH_PORT:
            return "nvlink"
        if dst == IB_SWITCH_PORT and self.nodes > 1:   # at the leaf, or a spine above them
            return ROUTES[3] if self.nodes <= self.per_leaf else ROUTES[4]
        a, b = src // self.per_node, dst // self.per_node
        if a == b:
            return "nvlink"
        return ROUTES[1] if a // self.per_leaf == b // self.per_leaf else ROUTES[2]

    def check(self, index, rec):
        where = lambda field, problem: _where(self.path, index, field, problem)
        if rec.rtype not in TYPE_NAMES or (rec.rtype == WAIT and self.version < WAIT_VERSION):
            raise where("type", f"unknown record type {rec.rtype}")
        if rec.rtype == WAIT:
            self.check_wait(where, rec)
            return
        self.extends = rec if rec.rtype in (MEM, GRAD) and rec.b != NO_DEP else None
        if rec.rtype == KERNEL:
            if rec.op >= len(PHASES):
                raise where("op", f"{rec.op} is not one of {', '.join(PHASES)}")
        else:
            names = MEM_OPS if rec.rtype == MEM else self.algos
            op, route = rec.op, 0
            if self.version >= 3:
                op, route = rec.op & _OP_MASK, rec.op >> _ROUTE_SHIFT
            if op >= len(names):
                raise where("op", f"{op} is not one of {', '.join(names)}")
            if route >= len(ROUTES):
                raise where("route", f"{route} is not one of {', '.join(ROUTES)}")
        if rec.gpu >= self.gpus:
            raise where("gpu", f"{rec.gpu} is out of range (trace has {self.gpus} GPUs)")
        if rec.id in self.ids:
            raise where("id", f"{rec.id} is used twice")
        if rec.rtype in (MEM, GRAD):
            switch_ok = rec.rtype == GRAD
            ib_ok = switch_ok and self.nodes > 1
            if not (rec.peer < self.gpus or (switch_ok and rec.peer == SWITCH_PORT) or
                    (ib_ok and rec.peer == IB_SWITCH_PORT)):
                raise where("peer", f"{rec.peer} is out of range (trace has {self.gpus} GPUs"
                                    f"{', or the switch' if switch_ok else ''}"
                                    f"{' or the InfiniBand switch' if ib_ok else ''})")
            if rec.peer == rec.gpu:
                raise where("peer", "a GPU does not send to itself")
            if rec.peer == IB_SWITCH_PORT and ALGOS[rec.op & _OP_MASK] != "sharp":
                raise where("peer", "only sharp sends to the InfiniBand switch")
            if rec.b != NO_DEP and rec.b not in self.ids:
                raise where("dep", f"{rec.b} does not name an earlier record")
            if rec.a == 0:
                raise where("bytes", "must be positive")
            if self.version >= 3:
                want = self.expected_route(rec.gpu, rec.peer)
                if rec.route != want:
                    to = {SWITCH_PORT: "the switch", IB_SWITCH_PORT: "the InfiniBand switch"}
                    node = lambda g: f"GPU {g} (node {g // self.per_node})"   # noqa: E731
                    raise where("route", f"{rec.route} is not the route from {node(rec.gpu)} "
                                         f"to {to.get(rec.peer) or node(rec.peer)}: {want}")
        if rec.rtype == MEM and ((rec.aux & 0xFF) >= len(TRAFFIC) or rec.aux & 0x7F00):
            raise where("traffic", f"{rec.aux & 0x7FFF} is not one of "
                                   f"{', '.join(TRAFFIC)}")
        self.ids.add(rec.id)

    def check_wait(self, where, rec):
        """A wait record: after a mem or grad record with a dependency (or its waits), naming
        that record and an earlier one."""
        last = self.extends
        if last is None:
            raise where("wait", "follows no mem or grad record with a dependency")
        if rec.id != last.id or rec.gpu != last.gpu:
            raise where("id", f"gpu={rec.gpu} id={rec.id} is not the record it follows "
                              f"(gpu={last.gpu} id={last.id})")
        if rec.b == NO_DEP or rec.b not in self.ids or rec.b == rec.id:
            raise where("dep", f"{rec.b} does not name an earlier record")
        for field in ("op", "peer", "job", "slot", "aux", "time_ns", "a"):
            if getattr(rec, field):
                raise where(field, "must be 0 in a wait record")
        self.waits += 1


def _folded(records, version):
    """``records`` (validated, in file order) with each run of wait records folded into the
    record they extend (:attr:`TraceRecord.waits`). Before version 4 there are none: the
    records pass as they come (a record is yielded before the next is read)."""
    if version < WAIT_VERSION:
        yield from records
        return
    pending, waits = None, []
    for rec in records:
        if rec.rtype == WAIT:
            waits.append(rec.b)
            continue
        if pending is not None:
            yield replace(pending, waits=tuple(waits)) if waits else pending
        pending, waits = rec, []
    if pending is not None:
        yield replace(pending, waits=tuple(waits)) if waits else pending


def _checksum_mismatch(path, index, what):
    return TraceError(f"{path}:{index}: checksum mismatch ({what})")


def _truncated(path, index, what, have, need):
    return TraceError(f"{path}:{index}: truncated ({what}: {have} of {need} bytes)")


def _read_binary(path, handle):
    """Read the header of either version; returns ``(meta, records, layout)``."""
    header = handle.read(_HEADER.size + _CRC.size)
    if len(header) < _HEADER_V1.size:
        raise _where(path, 0, "header", "file is shorter than the header")
    magic, version, _reserved, meta_len = _HEADER_V1.unpack_from(header)
    if magic != MAGIC:
        raise _where(path, 0, "magic", "not an innet trace")
    if version not in READ_VERSIONS:
        raise _where(path, 0, "version", f"{version} is not supported (this reader: "
                                         f"{', '.join(map(str, READ_VERSIONS))})")
    if version == 1:
        handle.seek(_HEADER_V1.size)
        meta, records = _read_binary_v1(path, handle, meta_len)
        return meta, records, {"version": 1, "form": "binary", "checksums": "none (version 1)"}
    meta, records, block = _read_binary_v2(path, handle, header)
    return meta, records, {"version": version, "form": "binary",
                           "checksums": f"crc32 per {block} records, header and metadata"}


def _read_binary_v1(path, handle, meta_len):
    meta = _parse_meta(path, handle.read(meta_len).decode("utf-8", errors="replace"), 1)
    validator = _Validator(path, meta, 1)

    def records():
        index = 0
        while True:
            chunk = handle.read(RECORD.size * 4096)
            if not chunk:
                return
            whole = len(chunk) - len(chunk) % RECORD.size
            for fields in RECORD.iter_unpack(chunk[:whole]):
                index += 1
                rec = TraceRecord(*fields)
                validator.check(index, rec)
                yield rec
            if whole != len(chunk):
                raise _where(path, index + 1, "record",
                             f"truncated ({len(chunk) - whole} of {RECORD.size} bytes)")
    return meta, records()


def _read_binary_v2(path, handle, header):
    """The header and metadata are checked before anything is returned, the file's length
    against the header's record count too; each block's checksum before its first record is
    yielded."""
    header_size = _HEADER.size + _CRC.size
    if len(header) < header_size:
        raise _truncated(path, 0, "header", len(header), header_size)
    _magic, version, _reserved, meta_len, block, count = _HEADER.unpack_from(header)
    if zlib.crc32(header[:_HEADER.size]) != _CRC.unpack_from(header, _HEADER.size)[0]:
        raise _checksum_mismatch(path, 0, "header")
    if not 1 <= block <= MAX_BLOCK_RECORDS:
        raise _where(path, 0, "block", f"{block} records per block is out of range "
                                       f"[1, {MAX_BLOCK_RECORDS}]")
    size = os.fstat(handle.fileno()).st_size
    if size - header_size < meta_len + _CRC.size:
        raise _truncated(path, 0, "metadata", size - header_size, meta_len + _CRC.size)
    meta_bytes = handle.read(meta_len)
    if zlib.crc32(meta_bytes) != _CRC.unpack(handle.read(_CRC.size))[0]:
        raise _checksum_mismatch(path, 0, "metadata")
    try:
        meta_text = meta_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise _where(path, 0, "metadata", "not UTF-8") from None
    meta = _parse_meta(path, meta_text, version)
    validator = _Validator(path, meta, version)

    # The file's length follows from the header: refuse a short or long one before reading on.
    start = header_size + meta_len + _CRC.size
    full = block * RECORD.size + _CRC.size
    blocks = -(-count // block)
    end = start + count * RECORD.size + blocks * _CRC.size
    if size < end:
        k, have = divmod(size - start, full)
        first, last = k * block + 1, min((k + 1) * block, count)
        raise _truncated(path, first, f"records {first}-{last}", have,
                         (last - first + 1) * RECORD.size + _CRC.size)
    if size > end:
        raise TraceError(f"{path}:{count + 1}: trailing bytes ({size - end} after the last of "
                         f"{count} records)")

    def records():
        unpack, crc32, make, check = RECORD.iter_unpack, zlib.crc32, TraceRecord, validator.check
        index = 0
        while index < count:
            first, last = index + 1, min(index + block, count)
            want = (last - index) * RECORD.size
            data = handle.read(want + _CRC.size)
            if len(data) != want + _CRC.size:     # the file shrank while being read
                raise _truncated(path, first, f"records {first}-{last}", len(data),
                                 want + _CRC.size)
            body = memoryview(data)[:want]
            if crc32(body) != _CRC.unpack_from(data, want)[0]:
                raise _checksum_mismatch(path, first, f"records {first}-{last}")
            for fields in unpack(body):
                index += 1
                rec = make(*fields)
                check(index, rec)
                yield rec
    return meta, _folded(records(), version), block


def _parse_meta(path, text, version=VERSION):
    """The metadata JSON, checked: ``gpus``; in version 3 the nodes (``nodes``,
    ``gpus_per_node`` with nodes x gpus_per_node = gpus, ``nodes_per_leaf``) when given."""
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _where(path, 0, "metadata", f"invalid JSON ({exc.msg})") from None
    if not isinstance(meta, dict):
        raise _where(path, 0, "metadata", "must be a JSON object")
    gpus = meta.get("gpus")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise _where(path, 0, "gpus", f"must be a positive integer, not {gpus!r}")
    if gpus > 0xFFFF:
        raise _where(path, 0, "gpus", f"{gpus} exceeds 65535")
    if version < 3 or "nodes" not in meta:
        return meta
    if gpus > IB_SWITCH_PORT:   # GPU ids stay below the two switch ids
        raise _where(path, 0, "gpus", f"{gpus} exceeds {IB_SWITCH_PORT}")
    nodes = _meta_int(meta, "nodes")
    if nodes is None or nodes < 1:
        raise _where(path, 0, "nodes", f"must be a positive integer, not {meta['nodes']!r}")
    if nodes > 1:
        per_node, per_leaf = _meta_int(meta, "gpus_per_node"), _meta_int(meta, "nodes_per_leaf")
        if per_node is None or per_node * nodes != gpus:
            raise _where(path, 0, "gpus_per_node", f"must be gpus / nodes = {gpus} / {nodes}, "
                                                   f"not {meta.get('gpus_per_node')!r}")
        if per_leaf is None or per_leaf < 1:
            raise _where(path, 0, "nodes_per_leaf", f"must be a positive integer, not "
                                                    f"{meta.get('nodes_per_leaf')!r}")
    return meta


def _parse_text_record(path, lineno, line):
    words = line.split()
    types = {v: k for k, v in TYPE_NAMES.items()}
    if words[0] not in types:
        raise _where(path, lineno, "type", f"unknown record type {words[0]!r}")
    rtype = types[words[0]]
    keys = dict(_TEXT_KEYS[rtype])
    values = {}
    route = 0
    for word in words[1:]:
        key, sep, text = word.partition("=")
        if not sep:
            raise _where(path, lineno, word, "expected key=value")
        if key not in keys:
            raise _where(path, lineno, key, f"not a field of a {words[0]} record "
                                            f"({', '.join(keys)})")
        attr = keys[key]
        if key == "route":
            if text not in ROUTES:
                raise _where(path, lineno, key, f"{text!r} is not one of {', '.join(ROUTES)}")
            route = ROUTES.index(text)
            continue
        if (rtype, attr) in _ENUMS:
            choices = _ENUMS[(rtype, attr)]
            if text not in choices:
                raise _where(path, lineno, key, f"{text!r} is not one of {', '.join(choices)}")
            values[attr] = choices.index(text)
            continue
        if key == "dep" and text == "none":
            values[attr] = NO_DEP
            continue
        if key == "peer" and text == "switch":
            values[attr] = SWITCH_PORT
            continue
        if key == "peer" and text == "ibswitch" and rtype == GRAD:
            values[attr] = IB_SWITCH_PORT
            continue
        if rtype == MEM and key == "traffic":
            if text not in TRAFFIC:
                raise _where(path, lineno, key, f"{text!r} is not one of {', '.join(TRAFFIC)}")
            values["aux"] = values.get("aux", 0) & CRITICAL | TRAFFIC.index(text)
            continue
        if rtype == MEM and key == "critical":
            if text not in ("0", "1"):
                raise _where(path, lineno, key, f"{text!r} is not 0 or 1")
            values["aux"] = values.get("aux", 0) & 0xFF | (CRITICAL if text == "1" else 0)
            continue
        try:
            number = int(text)
        except ValueError:
            raise _where(path, lineno, key, f"{text!r} is not an integer") from None
        if not 0 <= number <= _LIMITS[attr]:
            raise _where(path, lineno, key, f"{number} is out of range [0, {_LIMITS[attr]}]")
        values[attr] = number
    optional = ("job", "tag", "dep", "slot", "chunk", "hbm_kib", "sms", "traffic", "critical",
                "route")
    missing = [k for k, attr in _TEXT_KEYS[rtype] if attr not in values and
               (k not in optional or rtype == WAIT)]
    if missing:
        raise _where(path, lineno, missing[0], "missing")
    values.setdefault("b", NO_DEP if rtype in (MEM, GRAD) else 0)
    if route:
        values["op"] = values.get("op", 0) | route << _ROUTE_SHIFT
    return TraceRecord(rtype, **values)


def _read_text(path, handle):
    first = handle.readline()
    head, _, rest = first.partition(" ")
    version, _, meta_text = rest.partition(" ")
    if head != "innet-trace":
        raise _where(path, 1, "header", "not an innet trace (first line must start with "
                                        "'innet-trace')")
    if version not in map(str, READ_VERSIONS):
        raise _where(path, 1, "version", f"{version!r} is not supported (this reader: "
                                         f"{', '.join(map(str, READ_VERSIONS))})")
    meta = _parse_meta(path, meta_text, int(version))
    validator = _Validator(path, meta, int(version))

    def records():
        for lineno, line in enumerate(handle, start=2):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            rec = _parse_text_record(path, lineno, line)
            validator.check(lineno, rec)
            yield rec
    return meta, _folded(records(), int(version)), {"version": int(version), "form": "text",
                             "checksums": "none (text form)"}


def _open(path):
    """Open a trace; returns ``(metadata, records, layout)``, ``layout`` a dict of the file's
    ``version``, ``form`` (``binary`` or ``text``) and ``checksums`` (what they cover, or
    ``none (...)``)."""
    path = Path(path)
    try:
        handle = open(path, "rb")   # noqa: SIM115 (closed by the records generator)
    except OSError as exc:
        raise TraceError(f"{path}:0: file: {exc.strerror}") from None
    try:
        start = handle.read(len(MAGIC))
        handle.seek(0)
        if start == MAGIC:
            meta, gen, layout = _read_binary(path, handle)
        else:
            handle.close()
            handle = open(path, encoding="utf-8", errors="replace")   # noqa: SIM115
            meta, gen, layout = _read_text(path, handle)
    except BaseException:
        handle.close()
        raise

    def closing():
        try:
            yield from gen
        finally:
            handle.close()
    return meta, closing(), layout


def read_trace(path):
    """Open a trace (binary of either version, or text, by content). Returns
    ``(metadata, records)`` where ``records`` is a generator that validates each record as it
    yields it; in the binary form of version 2, it yields a block's records once the block's
    checksum matched. The header, the metadata and the file's length are checked before this
    returns.

    Raises
    ------
    TraceError
        On the first problem, as ``file:record: field: problem``, or
        ``file:record: checksum mismatch (header | metadata | records A-B)``,
        ``file:record: truncated (...)``, ``file:record: trailing bytes (...)``.
    """
    meta, records, _ = _open(path)
    return meta, records


def write_trace(path, meta, records, fmt=None, *, block_records=BLOCK_RECORDS):
    """Write a trace atomically (a temporary file renamed into place): of version
    :data:`VERSION`, or :data:`WAIT_VERSION` when a record waits for more than one (its wait
    records follow it). ``fmt`` is ``binary`` or ``text``; by default ``text`` for a ``.txt``
    path, else ``binary``. The binary form carries a CRC-32 per ``block_records`` records
    (1..:data:`MAX_BLOCK_RECORDS`). The metadata's ``format_version`` is set to the version
    written. Records are validated as they are written (a bad record leaves no file behind).

    Returns the number of records written (wait records included).

    Raises
    ------
    TraceError
        A record or the metadata is invalid (``file:record: field: problem``).
    ValueError
        ``fmt`` or ``block_records`` is not one of the above.
    """
    path = Path(path)
    fmt = fmt or ("text" if path.suffix == ".txt" else "binary")
    if fmt not in ("binary", "text"):
        raise ValueError(f"fmt must be 'binary' or 'text', not {fmt!r}")
    if not 1 <= block_records <= MAX_BLOCK_RECORDS:
        raise ValueError(f"block_records must be in [1, {MAX_BLOCK_RECORDS}], not "
                         f"{block_records}")
    # The records stream, so the version is known only at the end: the header and metadata
    # are written as version 3 and rewritten in place as version 4 if a wait record went out
    # (one digit either way: the same length).
    meta = {**meta, "format_version": VERSION}
    validator = _Validator(path, _parse_meta(path, json.dumps(meta)), WAIT_VERSION)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    os.chmod(tmp, 0o666 & ~current_umask())   # mkstemp creates 0600
    try:
        with os.fdopen(fd, "wb") as out:
            write = _write_binary if fmt == "binary" else _write_text
            count = write(out, meta, records, validator, block_records)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def _file_records(records, validator):
    """The records of the file, each mem or grad record followed by its wait records,
    validated; ``(index, record)`` pairs, index 1-based."""
    count = 0
    for rec in records:
        for raw in rec.wire():
            count += 1
            validator.check(count, raw)
            yield count, raw


def _meta_bytes(meta, version):
    return json.dumps({**meta, "format_version": version}, sort_keys=True).encode()


def _header(meta_len, block_records, count, version=VERSION):
    header = _HEADER.pack(MAGIC, version, 0, meta_len, block_records, count)
    return header + _CRC.pack(zlib.crc32(header))


def _write_binary(out, meta, records, validator, block_records):
    meta_bytes = _meta_bytes(meta, VERSION)
    out.write(_header(len(meta_bytes), block_records, 0))   # rewritten with the count below
    out.write(meta_bytes + _CRC.pack(zlib.crc32(meta_bytes)))
    count = 0
    batch = []
    for count, rec in _file_records(records, validator):
        batch.append(rec.pack())
        if len(batch) == block_records:
            body = b"".join(batch)
            out.write(body + _CRC.pack(zlib.crc32(body)))
            batch = []
    if batch:
        body = b"".join(batch)
        out.write(body + _CRC.pack(zlib.crc32(body)))
    version = WAIT_VERSION if validator.waits else VERSION
    out.seek(0)
    out.write(_header(len(meta_bytes), block_records, count, version))
    if version != VERSION:
        meta_bytes = _meta_bytes(meta, version)
        out.write(meta_bytes + _CRC.pack(zlib.crc32(meta_bytes)))
    return count


def _first_line(meta, version):
    return f"innet-trace {version} ".encode() + _meta_bytes(meta, version) + b"\n"


def _write_text(out, meta, records, validator, _block_records):
    out.write(_first_line(meta, VERSION))
    count = 0
    batch = []
    for count, rec in _file_records(records, validator):
        batch.append((rec.to_text() + "\n").encode())
        if len(batch) >= 4096:
            out.write(b"".join(batch))
            batch = []
    out.write(b"".join(batch))
    if validator.waits:
        out.seek(0)
        out.write(_first_line(meta, WAIT_VERSION))
    return count


def trace_summary(path):
    """Read (and so validate) a whole trace and summarise it: record counts per type and GPU,
    bytes, span, and the file's ``version``, ``form`` and ``checksums`` (what they cover, or
    ``none (version 1)`` / ``none (text form)``). ``route_bytes``: the bytes of the mem and
    grad records by route (:data:`ROUTES`, those with any); ``by_type`` counts the records of
    the file, a version-4 file's wait records as ``wait``; ``link_bytes``: by link kind, a
    message's bytes counted once for every kind of link its route crosses (``nvlink``,
    ``pcie``, ``nic``, ``leaf``, ``spine``: what leaves the sender on that kind of link)."""
    meta, records, layout = _open(path)
    counts = {name: 0 for t, name in TYPE_NAMES.items() if t != WAIT}
    waits = 0
    grad_bytes = mem_bytes = 0
    kernel_ns = 0
    first, last = None, 0
    per_gpu = [0] * meta["gpus"]
    route_bytes = {}
    for rec in records:
        counts[TYPE_NAMES[rec.rtype]] += 1
        per_gpu[rec.gpu] += 1
        end = rec.end_ns if rec.rtype == KERNEL else rec.time_ns
        first = rec.time_ns if first is None else min(first, rec.time_ns)
        last = max(last, end)
        if rec.rtype == KERNEL:
            kernel_ns += rec.duration_ns
            continue
        waits += len(rec.waits)
        if rec.rtype == GRAD:
            grad_bytes += rec.bytes
        else:
            mem_bytes += rec.bytes
        route_bytes[rec.route] = route_bytes.get(rec.route, 0) + rec.bytes
    link_bytes = {}
    for route in ROUTES:
        for link in dict.fromkeys(ROUTE_LINKS[route]):
            if route in route_bytes:
                link_bytes[link] = link_bytes.get(link, 0) + route_bytes[route]
    if waits:
        counts["wait"] = waits
    return {"file": str(path), **layout, "metadata": meta, "records": sum(counts.values()),
            "by_type": counts, "records_per_gpu": per_gpu, "grad_bytes": grad_bytes,
            "mem_bytes": mem_bytes, "kernel_ns": kernel_ns,
            "route_bytes": {r: route_bytes[r] for r in ROUTES if r in route_bytes},
            "link_bytes": link_bytes,
            "span_ns": (last - first) if first is not None else 0}

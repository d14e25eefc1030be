"""The innet GPU trace format, version 1: the one definition (docs/trace-format.md).

A trace holds, per GPU, compute kernel records, memory-traffic records (remote reads and writes
through the switch) and gradient message records (collective traffic with its dependencies).

Binary form (``.itr``)::

    8 bytes   magic b"INNETTRC"
    u16       version (1)
    u16       reserved (0)
    u32       length of the metadata, bytes
    ...       metadata: UTF-8 JSON object; "gpus" (int ≥ 1) is required
    records   32 bytes each, little endian, layout RECORD (below), to the end of the file

Text form (``.txt``): a first line ``innet-trace 1 <metadata JSON>``, then one record per line,
``<type> key=value ...`` with the keys of that type (blank lines and ``#`` comments allowed).

Code outside this module reads a record through the accessors named by meaning on
:class:`TraceRecord` (``bytes``, ``dependency``, ``bucket``, ``chunk``, ``duration_ns``, ...)
and builds one with :meth:`TraceRecord.kernel`, :meth:`TraceRecord.mem` or
:meth:`TraceRecord.grad`; only this module knows which raw field holds what.

Readers stream: :func:`read_trace` yields records one at a time and validates each as it goes,
raising :class:`TraceError` with ``file:record: field: problem`` (record = 1-based record
number; in the text form, the line number).
"""

import json
import os
import struct
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from sim.errors import InputError
from sim.files import current_umask

__all__ = ["VERSION", "MAGIC", "RECORD", "KERNEL", "MEM", "GRAD", "NO_DEP", "SWITCH_PORT",
           "PHASES", "MEM_OPS", "ALGOS", "TraceRecord", "TraceError", "read_trace",
           "write_trace", "trace_summary"]

VERSION = 1
MAGIC = b"INNETTRC"
_HEADER = struct.Struct("<8sHHI")
#: rtype, op, gpu, peer, job, slot, aux, id, time_ns, a, b
RECORD = struct.Struct("<BBHHHHHIQII")
assert RECORD.size == 32

KERNEL, MEM, GRAD = 1, 2, 3
TYPE_NAMES = {KERNEL: "kernel", MEM: "mem", GRAD: "grad"}
NO_DEP = 0xFFFFFFFF
SWITCH_PORT = 0xFFFF
PHASES = ("fwd", "bwd", "opt", "comm", "other")
MEM_OPS = ("read", "write")
ALGOS = ("ring", "tree", "direct", "inswitch", "p2p")

# Text keys per record type, in order: (key, record attribute).
_TEXT_KEYS = {
    KERNEL: [("gpu", "gpu"), ("id", "id"), ("start_ns", "time_ns"), ("dur_ns", "a"),
             ("sms", "aux"), ("hbm_kib", "b"), ("phase", "op"), ("job", "job")],
    MEM: [("gpu", "gpu"), ("peer", "peer"), ("id", "id"), ("time_ns", "time_ns"),
          ("bytes", "a"), ("op", "op"), ("tag", "slot"), ("dep", "b"), ("job", "job")],
    GRAD: [("gpu", "gpu"), ("peer", "peer"), ("id", "id"), ("time_ns", "time_ns"),
           ("bytes", "a"), ("job", "job"), ("slot", "slot"), ("chunk", "aux"), ("dep", "b"),
           ("algo", "op")],
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
    ``mem_op``                            ``op``
    ``bucket``                                        ``slot``
    ``chunk``                                         ``aux``
    ``algo``                                          ``op``
    ``to_switch``                                     ``peer == SWITCH_PORT``
    ========================  ==========  ==========  =====================================

    An accessor read on a record type it does not apply to raises :class:`TypeError` (a
    kernel has no byte count; a grad record has no duration), so a consumer never reads a
    field of another type by mistake.
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

    # -- constructors named by meaning ------------------------------------------------------

    @classmethod
    def kernel(cls, *, gpu, id, start_ns, duration_ns, phase="fwd", sms=0, hbm_kib=0, job=0):
        """A compute or collective kernel on ``gpu``: ``start_ns`` and ``duration_ns`` in ns,
        ``phase`` one of :data:`PHASES`, ``sms`` SMs used, ``hbm_kib`` HBM traffic in KiB
        (2^10 bytes)."""
        return cls(KERNEL, op=_enum_index(PHASES, "phase", phase), gpu=gpu, id=id,
                   time_ns=start_ns, a=duration_ns, aux=sms, b=hbm_kib, job=job)

    @classmethod
    def mem(cls, *, gpu, peer, id, time_ns, bytes, op="write", tag=0, dependency=None, job=0):
        """A remote ``read`` or ``write`` (``op``, one of :data:`MEM_OPS`) of ``bytes`` bytes
        from ``gpu`` to GPU ``peer``, issued at ``time_ns``; it waits for record
        ``dependency`` (a record id, or ``None``)."""
        return cls(MEM, op=_enum_index(MEM_OPS, "op", op), gpu=gpu, peer=peer, id=id,
                   time_ns=time_ns, a=bytes, slot=tag, b=_dep_field(dependency), job=job)

    @classmethod
    def grad(cls, *, gpu, peer, id, time_ns, bytes, algo, bucket=0, chunk=0, dependency=None,
             job=0):
        """A gradient message piece of ``bytes`` bytes from ``gpu`` to GPU ``peer`` (or
        :data:`SWITCH_PORT`: an in-switch contribution), issued at ``time_ns``, of collective
        ``algo`` (one of :data:`ALGOS`), bucket (switch slot) ``bucket`` and piece ``chunk``;
        it waits for record ``dependency`` (a record id, or ``None``)."""
        return cls(GRAD, op=_enum_index(ALGOS, "algo", algo), gpu=gpu, peer=peer, id=id,
                   time_ns=time_ns, a=bytes, slot=bucket, aux=chunk, b=_dep_field(dependency),
                   job=job)

    def with_dependency(self, dependency):
        """This mem or grad record waiting for record ``dependency`` instead (``None``:
        nothing)."""
        self._require((MEM, GRAD), "dependency")
        return replace(self, b=_dep_field(dependency))

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
        """Mem and grad: id of the record this one waits for, or ``None``."""
        self._require((MEM, GRAD), "dependency")
        return None if self.b == NO_DEP else self.b

    @property
    def tag(self):
        """Mem: the requester's tag."""
        self._require((MEM,), "tag")
        return self.slot

    @property
    def mem_op(self):
        """Mem: ``"read"`` or ``"write"``."""
        self._require((MEM,), "mem_op")
        return MEM_OPS[self.op]

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
        return ALGOS[self.op]

    @property
    def to_switch(self):
        """Grad: whether the piece is an in-switch contribution (``peer`` is the switch)."""
        self._require((GRAD,), "to_switch")
        return self.peer == SWITCH_PORT

    # -- encoding ---------------------------------------------------------------------------

    def pack(self):
        return RECORD.pack(self.rtype, self.op, self.gpu, self.peer, self.job, self.slot,
                           self.aux, self.id, self.time_ns, self.a, self.b)

    def to_text(self):
        name = TYPE_NAMES[self.rtype]
        parts = [name]
        for key, attr in _TEXT_KEYS[self.rtype]:
            value = getattr(self, attr)
            if (self.rtype, attr) in _ENUMS:
                value = _ENUMS[(self.rtype, attr)][value]
            elif attr == "b" and key == "dep":
                value = "none" if value == NO_DEP else value
            elif attr == "peer" and value == SWITCH_PORT:
                value = "switch"
            parts.append(f"{key}={value}")
        return " ".join(parts)


class TraceError(InputError, ValueError):
    """A trace failed to load: the message is ``file:record: field: problem``."""


def _where(path, index, field, problem):
    return TraceError(f"{path}:{index}: {field}: {problem}")


class _Validator:
    def __init__(self, path, meta):
        self.path = path
        self.gpus = meta["gpus"]
        self.ids = set()

    def check(self, index, rec):
        where = lambda field, problem: _where(self.path, index, field, problem)  # noqa: E731
        if rec.rtype not in TYPE_NAMES:
            raise where("type", f"unknown record type {rec.rtype}")
        if (rec.rtype, "op") in _ENUMS and rec.op >= len(_ENUMS[(rec.rtype, "op")]):
            raise where("op", f"{rec.op} is not one of "
                              f"{', '.join(_ENUMS[(rec.rtype, 'op')])}")
        if rec.gpu >= self.gpus:
            raise where("gpu", f"{rec.gpu} is out of range (trace has {self.gpus} GPUs)")
        if rec.id in self.ids:
            raise where("id", f"{rec.id} is used twice")
        if rec.rtype in (MEM, GRAD):
            switch_ok = rec.rtype == GRAD
            if not (rec.peer < self.gpus or (switch_ok and rec.peer == SWITCH_PORT)):
                raise where("peer", f"{rec.peer} is out of range (trace has {self.gpus} GPUs"
                                    f"{', or the switch' if switch_ok else ''})")
            if rec.peer == rec.gpu:
                raise where("peer", "a GPU does not send to itself")
            if rec.b != NO_DEP and rec.b not in self.ids:
                raise where("dep", f"{rec.b} does not name an earlier record")
            if rec.a == 0:
                raise where("bytes", "must be positive")
        self.ids.add(rec.id)


def _read_binary(path, handle):
    header = handle.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise _where(path, 0, "header", "file is shorter than the header")
    magic, version, _reserved, meta_len = _HEADER.unpack(header)
    if magic != MAGIC:
        raise _where(path, 0, "magic", "not an innet trace")
    if version != VERSION:
        raise _where(path, 0, "version", f"{version} is not supported (this reader: {VERSION})")
    meta = _parse_meta(path, handle.read(meta_len).decode("utf-8", errors="replace"))
    validator = _Validator(path, meta)

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


def _parse_meta(path, text):
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
    return meta


def _parse_text_record(path, lineno, line):
    words = line.split()
    types = {v: k for k, v in TYPE_NAMES.items()}
    if words[0] not in types:
        raise _where(path, lineno, "type", f"unknown record type {words[0]!r}")
    rtype = types[words[0]]
    keys = dict(_TEXT_KEYS[rtype])
    values = {}
    for word in words[1:]:
        key, sep, text = word.partition("=")
        if not sep:
            raise _where(path, lineno, word, "expected key=value")
        if key not in keys:
            raise _where(path, lineno, key, f"not a field of a {words[0]} record "
                                            f"({', '.join(keys)})")
        attr = keys[key]
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
        try:
            number = int(text)
        except ValueError:
            raise _where(path, lineno, key, f"{text!r} is not an integer") from None
        if not 0 <= number <= _LIMITS[attr]:
            raise _where(path, lineno, key, f"{number} is out of range [0, {_LIMITS[attr]}]")
        values[attr] = number
    missing = [k for k, attr in _TEXT_KEYS[rtype] if attr not in values and k not in
               ("job", "tag", "dep", "slot", "chunk", "hbm_kib", "sms")]
    if missing:
        raise _where(path, lineno, missing[0], "missing")
    values.setdefault("b", NO_DEP if rtype in (MEM, GRAD) else 0)
    return TraceRecord(rtype, **values)


def _read_text(path, handle):
    first = handle.readline()
    head, _, rest = first.partition(" ")
    version, _, meta_text = rest.partition(" ")
    if head != "innet-trace":
        raise _where(path, 1, "header", "not an innet trace (first line must start with "
                                        "'innet-trace')")
    if version != str(VERSION):
        raise _where(path, 1, "version", f"{version!r} is not supported (this reader: "
                                         f"{VERSION})")
    meta = _parse_meta(path, meta_text)
    validator = _Validator(path, meta)

    def records():
        for lineno, line in enumerate(handle, start=2):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            rec = _parse_text_record(path, lineno, line)
            validator.check(lineno, rec)
            yield rec
    return meta, records()


def read_trace(path):
    """Open a trace (binary or text, by content). Returns ``(metadata, records)`` where
    ``records`` is a generator that validates each record as it yields it.

    Raises
    ------
    TraceError
        On the first problem, as ``file:record: field: problem``.
    """
    path = Path(path)
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise TraceError(f"{path}:0: file: {exc.strerror}") from None
    start = handle.read(len(MAGIC))
    handle.seek(0)
    if start == MAGIC:
        meta, gen = _read_binary(path, handle)
    else:
        text = open(path, encoding="utf-8", errors="replace")
        handle.close()
        handle = text
        meta, gen = _read_text(path, handle)

    def closing():
        try:
            yield from gen
        finally:
            handle.close()
    return meta, closing()


def write_trace(path, meta, records, fmt=None):
    """Write a trace atomically (a temporary file renamed into place). ``fmt`` is ``binary`` or
    ``text``; by default ``text`` for a ``.txt`` path, else ``binary``. Records are validated
    as they are written (a bad record leaves no file behind).

    Returns the number of records written.
    """
    path = Path(path)
    fmt = fmt or ("text" if path.suffix == ".txt" else "binary")
    meta = dict(meta)
    meta.setdefault("format_version", VERSION)
    validator = _Validator(path, _parse_meta(path, json.dumps(meta)))
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    os.chmod(tmp, 0o666 & ~current_umask())   # mkstemp creates 0600
    count = 0
    try:
        with os.fdopen(fd, "wb") as out:
            meta_bytes = json.dumps(meta, sort_keys=True).encode()
            if fmt == "binary":
                out.write(_HEADER.pack(MAGIC, VERSION, 0, len(meta_bytes)))
                out.write(meta_bytes)
            else:
                out.write(f"innet-trace {VERSION} ".encode() + meta_bytes + b"\n")
            batch = []
            for rec in records:
                count += 1
                validator.check(count, rec)
                batch.append(rec.pack() if fmt == "binary" else
                             (rec.to_text() + "\n").encode())
                if len(batch) >= 4096:
                    out.write(b"".join(batch))
                    batch = []
            out.write(b"".join(batch))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def trace_summary(path):
    """Read a whole trace and summarise it (record counts per type and GPU, bytes, span)."""
    meta, records = read_trace(path)
    counts = {name: 0 for name in TYPE_NAMES.values()}
    grad_bytes = mem_bytes = 0
    kernel_ns = 0
    first, last = None, 0
    per_gpu = [0] * meta["gpus"]
    for rec in records:
        counts[TYPE_NAMES[rec.rtype]] += 1
        per_gpu[rec.gpu] += 1
        end = rec.end_ns if rec.rtype == KERNEL else rec.time_ns
        first = rec.time_ns if first is None else min(first, rec.time_ns)
        last = max(last, end)
        if rec.rtype == GRAD:
            grad_bytes += rec.bytes
        elif rec.rtype == MEM:
            mem_bytes += rec.bytes
        else:
            kernel_ns += rec.duration_ns
    return {"file": str(path), "metadata": meta, "records": sum(counts.values()),
            "by_type": counts, "records_per_gpu": per_gpu, "grad_bytes": grad_bytes,
            "mem_bytes": mem_bytes, "kernel_ns": kernel_ns,
            "span_ns": (last - first) if first is not None else 0}

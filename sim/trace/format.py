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

Readers stream: :func:`read_trace` yields records one at a time and validates each as it goes,
raising :class:`TraceError` with ``file:record: field: problem`` (record = 1-based record
number; in the text form, the line number).
"""

import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class TraceRecord:
    """One trace record (see the module doc for what each field means per type).

    kernel: ``gpu``, ``id``, ``time_ns`` = start, ``a`` = duration ns, ``aux`` = SMs,
    ``b`` = HBM KiB, ``op`` = phase. mem: ``gpu`` → ``peer``, ``a`` = bytes, ``op`` = read/write,
    ``slot`` = tag, ``b`` = dependency. grad: ``gpu`` → ``peer`` (or ``SWITCH_PORT``), ``a`` =
    bytes, ``job``, ``slot``, ``aux`` = chunk, ``b`` = dependency (a record id or ``NO_DEP``),
    ``op`` = algorithm.
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


class TraceError(ValueError):
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
        end = rec.time_ns + (rec.a if rec.rtype == KERNEL else 0)
        first = rec.time_ns if first is None else min(first, rec.time_ns)
        last = max(last, end)
        if rec.rtype == GRAD:
            grad_bytes += rec.a
        elif rec.rtype == MEM:
            mem_bytes += rec.a
        else:
            kernel_ns += rec.a
    return {"file": str(path), "metadata": meta, "records": sum(counts.values()),
            "by_type": counts, "records_per_gpu": per_gpu, "grad_bytes": grad_bytes,
            "mem_bytes": mem_bytes, "kernel_ns": kernel_ns,
            "span_ns": (last - first) if first is not None else 0}

"""Trace format v1: round trips, streaming, and errors as file:record: field: problem."""

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.gpu.presets import gpu_preset
from sim.gpu.workloads import resnet50
from sim.trace.format import (
    GRAD,
    KERNEL,
    MAGIC,
    MEM,
    NO_DEP,
    RECORD,
    SWITCH_PORT,
    TraceError,
    TraceRecord,
    read_trace,
    trace_summary,
    write_trace,
)
from sim.trace.generate import generate_trace

META = {"gpus": 4, "model": "test"}


def sample_records():
    return [
        TraceRecord.kernel(gpu=0, id=0, start_ns=10, duration_ns=500, phase="bwd", sms=108,
                           hbm_kib=1024),
        TraceRecord.grad(gpu=0, peer=1, id=1, time_ns=20, bytes=65536, algo="ring", bucket=3,
                         chunk=7),
        TraceRecord.grad(gpu=1, peer=SWITCH_PORT, id=2, time_ns=30, bytes=4096,
                         algo="inswitch", job=2, dependency=1),
        TraceRecord.mem(gpu=2, peer=3, id=3, time_ns=40, bytes=256, op="write", tag=9),
    ]


def test_record_is_32_bytes():
    assert RECORD.size == 32


def test_constructors_fill_the_documented_fields():
    """docs/trace-format.md's table: which raw field each named value occupies, per type."""
    assert sample_records() == [
        TraceRecord(KERNEL, op=1, gpu=0, id=0, time_ns=10, a=500, aux=108, b=1024),
        TraceRecord(GRAD, op=0, gpu=0, peer=1, id=1, time_ns=20, a=65536, slot=3, aux=7, b=NO_DEP),
        TraceRecord(GRAD, op=3, gpu=1, peer=SWITCH_PORT, id=2, time_ns=30, a=4096, job=2, b=1),
        TraceRecord(MEM, op=1, gpu=2, peer=3, id=3, time_ns=40, a=256, slot=9, b=NO_DEP),
    ]
    # the binary encoding of the kernel record, offset by offset
    assert sample_records()[0].pack() == struct.pack("<BBHHHHHIQII", 1, 1, 0, 0, 0, 0, 108, 0,
                                                     10, 500, 1024)


def test_accessors_read_the_documented_fields():
    kernel, ring, contribution, mem = sample_records()
    assert (kernel.start_ns, kernel.duration_ns, kernel.end_ns) == (10, 500, 510)
    assert (kernel.sms, kernel.hbm_kib, kernel.phase) == (108, 1024, "bwd")
    assert (ring.bytes, ring.bucket, ring.chunk, ring.algo) == (65536, 3, 7, "ring")
    assert ring.dependency is None and not ring.to_switch
    assert (contribution.dependency, contribution.algo, contribution.job) == (1, "inswitch", 2)
    assert contribution.to_switch
    assert (mem.bytes, mem.tag, mem.mem_op, mem.dependency) == (256, 9, "write", None)
    assert ring.with_dependency(0).dependency == 0
    assert contribution.with_dependency(None).dependency is None


@pytest.mark.parametrize("index, accessor", [
    (0, "bytes"), (0, "dependency"), (0, "bucket"), (1, "duration_ns"), (1, "tag"),
    (3, "chunk"), (3, "bucket"), (3, "sms"), (1, "phase"), (3, "algo"),
])
def test_accessor_of_another_record_type_raises(index, accessor):
    with pytest.raises(TypeError, match=f"record has no {accessor}"):
        getattr(sample_records()[index], accessor)


def test_constructor_rejects_unknown_names():
    with pytest.raises(ValueError, match="phase: 'sideways' is not one of"):
        TraceRecord.kernel(gpu=0, id=0, start_ns=0, duration_ns=1, phase="sideways")
    with pytest.raises(TypeError, match="kernel record has no dependency"):
        sample_records()[0].with_dependency(None)


@pytest.mark.parametrize("suffix", [".itr", ".txt"])
def test_round_trip(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    assert write_trace(path, META, sample_records()) == 4
    meta, records = read_trace(path)
    assert meta["gpus"] == 4 and meta["format_version"] == 1
    assert list(records) == sample_records()


def test_binary_and_text_agree_on_a_generated_trace(tmp_path):
    meta, records, _ = generate_trace(resnet50(16), gpu_preset("a100"), 4, "ring")
    write_trace(tmp_path / "a.itr", meta, records)
    write_trace(tmp_path / "a.txt", meta, records)
    assert list(read_trace(tmp_path / "a.itr")[1]) == list(read_trace(tmp_path / "a.txt")[1])
    summary = trace_summary(tmp_path / "a.itr")
    # ring moves 2(n-1)/n of every bucket from every GPU
    assert summary["grad_bytes"] == pytest.approx(4 * 2 * 3 / 4 * resnet50().params * 4,
                                                  rel=1e-3)


def test_inswitch_trace_sends_each_gradient_once(tmp_path):
    meta, records, result = generate_trace(resnet50(16), gpu_preset("a100"), 4, "inswitch")
    grads = [r for r in records if r.rtype == GRAD]
    assert all(r.peer == SWITCH_PORT for r in grads)
    assert sum(r.bytes for r in grads) == 4 * sum(result.bucket_bytes)


def test_reading_streams(tmp_path):
    """The reader yields the first record before it has read (and validated) the rest."""
    path = tmp_path / "t.itr"
    write_trace(path, META, sample_records())
    with open(path, "ab") as f:
        f.write(b"\x00" * 7)    # a truncated record at the end
    _, records = read_trace(path)
    assert next(records) == sample_records()[0]
    with pytest.raises(TraceError, match=r"t.itr:5: record: truncated \(7 of 32 bytes\)"):
        list(records)


def write_text(tmp_path, lines, meta=META):
    path = tmp_path / "bad.txt"
    path.write_text(f"innet-trace 1 {json.dumps(meta)}\n" + "\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("line, message", [
    ("kernel gpu=9 id=0 start_ns=0 dur_ns=1 phase=bwd", r"bad.txt:2: gpu: 9 is out of range"),
    ("kernel gpu=0 id=0 start_ns=0 dur_ns=1 phase=sideways", r"bad.txt:2: phase: 'sideways'"),
    ("grad gpu=0 peer=1 id=0 time_ns=0 bytes=8 dep=5 algo=ring",
     r"bad.txt:2: dep: 5 does not name"),
    ("grad gpu=0 peer=0 id=0 time_ns=0 bytes=8 algo=ring", r"bad.txt:2: peer: a GPU does not send"),
    ("grad gpu=0 peer=1 id=0 time_ns=0 bytes=0 algo=ring", r"bad.txt:2: bytes: must be positive"),
    ("grad gpu=0 peer=1 id=0 time_ns=-4 bytes=8 algo=ring",
     r"bad.txt:2: time_ns: -4 is out of range"),
    ("grad gpu=0 peer=1 id=0 time_ns=x bytes=8 algo=ring",
     r"bad.txt:2: time_ns: 'x' is not an integer"),
    ("mem gpu=0 peer=switch id=0 time_ns=0 bytes=8 op=write",
     r"bad.txt:2: peer: 65535 is out of range"),
    ("flit gpu=0", r"bad.txt:2: type: unknown record type 'flit'"),
    ("kernel gpu=0 start_ns=0 dur_ns=1 phase=fwd", r"bad.txt:2: id: missing"),
    ("kernel gpu=0 id=0 start_ns=0 dur_ns=1 phase=fwd colour=red",
     r"bad.txt:2: colour: not a field"),
])
def test_text_errors(tmp_path, line, message):
    path = write_text(tmp_path, [line])
    with pytest.raises(TraceError, match=message):
        list(read_trace(path)[1])


def test_duplicate_id(tmp_path):
    path = write_text(tmp_path, ["kernel gpu=0 id=3 start_ns=0 dur_ns=1 phase=fwd",
                                 "# a comment", "",
                                 "kernel gpu=1 id=3 start_ns=0 dur_ns=1 phase=fwd"])
    with pytest.raises(TraceError, match=r"bad.txt:5: id: 3 is used twice"):
        list(read_trace(path)[1])


@pytest.mark.parametrize("header, message", [
    (b"NOTATRACE", r":0: magic|:1: header"),
    (MAGIC + struct.pack("<HHI", 9, 0, 2) + b"{}", r":0: version: 9 is not supported"),
    (MAGIC + struct.pack("<HHI", 1, 0, 2) + b"{}", r":0: gpus: must be a positive integer"),
    (MAGIC + struct.pack("<HHI", 1, 0, 3) + b"{x}", r":0: metadata: invalid JSON"),
    (MAGIC[:4], r":1: header: not an innet trace"),
])
def test_binary_header_errors(tmp_path, header, message):
    path = tmp_path / "h.itr"
    path.write_bytes(header)
    with pytest.raises(TraceError, match=message):
        list(read_trace(path)[1])


def test_bad_record_while_writing_leaves_no_file(tmp_path):
    path = tmp_path / "w.itr"
    with pytest.raises(TraceError, match="w.itr:2: gpu"):
        write_trace(path, META, [sample_records()[0], TraceRecord(KERNEL, gpu=99, id=1)])
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 4 * 32))
def test_corrupted_binary_only_raises_trace_error(tmp_path_factory, noise, offset):
    path = tmp_path_factory.mktemp("fuzz") / "f.itr"
    write_trace(path, META, sample_records())
    data = bytearray(path.read_bytes())
    data[offset + 20: offset + 20 + len(noise)] = noise
    path.write_bytes(bytes(data))
    try:
        list(read_trace(path)[1])
    except TraceError as exc:
        assert str(exc).startswith(str(path) + ":")


def test_p2p_memory_records(tmp_path):
    meta, records, _ = generate_trace(resnet50(16), gpu_preset("a100"), 4, "inswitch",
                                      chunk_bytes=1 << 20, p2p_bytes=3 << 20)
    write_trace(tmp_path / "p.itr", meta, records)
    mem = [r for r in read_trace(tmp_path / "p.itr")[1] if r.rtype == MEM]
    assert len(mem) == 4 * 3 and all(r.peer == (r.gpu + 1) % 4 for r in mem)
    assert sum(r.bytes for r in mem) == 4 * (3 << 20)

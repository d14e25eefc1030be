"""Trace format v2 (v1 still read): round trips, streaming, checksums, and errors as
file:record: field: problem."""

import json
import re
import struct
import subprocess
import sys
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.gpu.presets import gpu_preset
from sim.gpu.workloads import resnet50
from sim.trace.format import (
    BLOCK_RECORDS,
    GRAD,
    KERNEL,
    MAGIC,
    MEM,
    NO_DEP,
    RECORD,
    SWITCH_PORT,
    VERSION,
    WAIT,
    WAIT_VERSION,
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


# -- the binary layouts, built by hand from docs/trace-format.md ----------------------------


def v1_bytes(meta, records):
    """Version 1: magic, version 1, reserved, metadata length; metadata; the records."""
    meta_bytes = json.dumps({**meta, "format_version": 1}, sort_keys=True).encode()
    return (MAGIC + struct.pack("<HHI", 1, 0, len(meta_bytes)) + meta_bytes
            + b"".join(r.pack() for r in records))


def write_v1(path, meta, records):
    path.write_bytes(v1_bytes(meta, records))
    return path


def crc(data):
    return struct.pack("<I", zlib.crc32(data))


def v2_bytes(meta_bytes, body, block, count, version=2, reserved=0):
    """Version 2 with correct checksums: header + CRC, metadata + CRC, ``body`` (the records'
    bytes) cut into blocks of ``block`` records, each followed by its CRC."""
    header = MAGIC + struct.pack("<HHIIQ", version, reserved, len(meta_bytes), block, count)
    size = max(block, 1) * RECORD.size
    blocks = [body[i:i + size] for i in range(0, len(body), size)]
    return (header + crc(header) + meta_bytes + crc(meta_bytes)
            + b"".join(b + crc(b) for b in blocks))


def meta_json(meta=META, version=2):
    return json.dumps({**meta, "format_version": version}, sort_keys=True).encode()


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
    with pytest.raises(TypeError, match="kernel record has no dependenc"):
        sample_records()[0].with_dependency(None)


@pytest.mark.parametrize("suffix", [".itr", ".txt"])
def test_round_trip(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    assert write_trace(path, META, sample_records()) == 4
    meta, records = read_trace(path)
    assert meta["gpus"] == 4 and meta["format_version"] == VERSION == 3
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
    _, records, result = generate_trace(resnet50(16), gpu_preset("a100"), 4, "inswitch")
    grads = [r for r in records if r.rtype == GRAD]
    assert all(r.peer == SWITCH_PORT for r in grads)
    assert sum(r.bytes for r in grads) == 4 * sum(result.bucket_bytes)


def test_reading_streams(tmp_path):
    """The reader yields a block's records before it has read (and checked) the next block."""
    path = tmp_path / "t.itr"
    write_trace(path, META, sample_records(), block_records=2)
    data = bytearray(path.read_bytes())
    data[-5] ^= 1                       # the last record of the second block
    path.write_bytes(bytes(data))
    _, records = read_trace(path)
    assert [next(records), next(records)] == sample_records()[:2]
    with pytest.raises(TraceError, match=r"t.itr:3: checksum mismatch \(records 3-4\)$"):
        list(records)


def test_v1_reading_streams(tmp_path):
    """Version 1 has no blocks: the reader yields record by record, up to a truncated one."""
    path = tmp_path / "t.itr"
    write_v1(path, META, sample_records())
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
    # version 1 headers
    (b"NOTATRACE", r":0: magic|:1: header"),
    (MAGIC + struct.pack("<HHI", 9, 0, 2) + b"{}", r":0: version: 9 is not supported"),
    (MAGIC + struct.pack("<HHI", 1, 0, 2) + b"{}", r":0: gpus: must be a positive integer"),
    (MAGIC + struct.pack("<HHI", 1, 0, 3) + b"{x}", r":0: metadata: invalid JSON"),
    (MAGIC[:4], r":1: header: not an innet trace"),
    (MAGIC + struct.pack("<HH", 1, 0), r":0: header: file is shorter than the header"),
    # version 2 headers, with correct checksums: the checks behind the checksums
    (v2_bytes(b"{}", b"", 4, 0), r":0: gpus: must be a positive integer"),
    (v2_bytes(b"{x}", b"", 4, 0), r":0: metadata: invalid JSON"),
    (v2_bytes(b'{"gpus": "\xff"}', b"", 4, 0), r":0: metadata: not UTF-8"),
    (v2_bytes(b'{"gpus": 4}', b"", 0, 0), r":0: block: 0 records per block is out of range"),
    (v2_bytes(b'{"gpus": 4}', b"", 4, 0, version=5),
     r":0: version: 5 is not supported \(this reader: 1, 2, 3, 4\)"),
    (v2_bytes(b'{"gpus": 4}', b"", 4, 0)[:20], r":0: truncated \(header: 20 of 32 bytes\)"),
    (v2_bytes(b'{"gpus": 4}', b"", 4, 0)[:40], r":0: truncated \(metadata: 8 of 15 bytes\)"),
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


# -- version 2: checksums ------------------------------------------------------------------

FIVE = [*sample_records(), TraceRecord.kernel(gpu=3, id=4, start_ns=50, duration_ns=7)]


def small_v2(tmp_path, name="s.itr"):
    """Five records in blocks of two: blocks 1-2, 3-4 and 5 (a short last block)."""
    path = tmp_path / name
    write_trace(path, META, FIVE, block_records=2)
    return path


def refusal(path):
    """The TraceError reading ``path`` raises, or None if the whole trace reads."""
    try:
        list(read_trace(path)[1])
    except TraceError as exc:
        return str(exc)
    return None


def test_v2_layout_is_the_documented_one(tmp_path):
    """Version 3 is written in version 2's layout; both read."""
    path = small_v2(tmp_path)
    body = b"".join(r.pack() for r in FIVE)
    assert path.read_bytes() == v2_bytes(meta_json(version=3), body, 2, 5, version=3)
    assert list(read_trace(path)[1]) == FIVE
    path.write_bytes(v2_bytes(meta_json(), body, 2, 5))
    assert list(read_trace(path)[1]) == FIVE


def test_v2_round_trip_is_bit_exact(tmp_path):
    """Reading a version-2 trace of several blocks and writing it again gives the same bytes."""
    meta, records, _ = generate_trace(resnet50(16), gpu_preset("a100"), 4, "ring")
    assert len(records) > 2 * BLOCK_RECORDS
    write_trace(tmp_path / "a.itr", meta, records)
    meta_again, again = read_trace(tmp_path / "a.itr")
    again = list(again)
    assert again == records
    write_trace(tmp_path / "b.itr", meta_again, again)
    assert (tmp_path / "a.itr").read_bytes() == (tmp_path / "b.itr").read_bytes()


def test_users_corruption_is_refused_with_its_block(tmp_path):
    """The reported damage: 0xFFFFFFFF written at a third of a generated trace (ResNet-50,
    8 GPUs, ring; 24904 records since the DDP bucket kernels, seven blocks), which version 1 accepted as valid."""
    meta, records, _ = generate_trace(resnet50(16), gpu_preset("a100"), 8, "ring")
    path = tmp_path / "r.itr"
    write_trace(path, meta, records)
    data = bytearray(path.read_bytes())
    offset = len(data) // 3
    data[offset:offset + 4] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(data))
    # the block holding that offset, by the documented layout
    start = 36 + struct.unpack_from("<I", data, 12)[0]
    first = (offset - start) // (BLOCK_RECORDS * RECORD.size + 4) * BLOCK_RECORDS + 1
    assert (len(records), first) == (24904, 8193)
    message = f"{path}:8193: checksum mismatch (records 8193-12288)"
    assert refusal(path) == message
    # the command line prints it in one line and exits 2
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "trace", "validate", str(path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"innet: error: {message}"]


# region, where (from: file start, metadata start, metadata end, records start), message
REGIONS = [
    ("magic", "file", 0, (r"s.itr:1: header: not an innet trace \(first line must start with "
                          r"'innet-trace'\)")),
    ("version", "file", 8, r"s.itr:0: version: 252 is not supported \(this reader: 1, 2, 3, 4\)"),
    ("reserved", "file", 10, r"s.itr:0: checksum mismatch \(header\)"),
    ("metadata length", "file", 12, r"s.itr:0: checksum mismatch \(header\)"),
    ("records per block", "file", 16, r"s.itr:0: checksum mismatch \(header\)"),
    ("record count", "file", 23, r"s.itr:0: checksum mismatch \(header\)"),
    ("header checksum", "file", 28, r"s.itr:0: checksum mismatch \(header\)"),
    ("metadata", "meta", 10, r"s.itr:0: checksum mismatch \(metadata\)"),
    ("metadata checksum", "meta_end", 3, r"s.itr:0: checksum mismatch \(metadata\)"),
    ("block 1", "data", 5, r"s.itr:1: checksum mismatch \(records 1-2\)"),
    ("block 1 checksum", "data", 64, r"s.itr:1: checksum mismatch \(records 1-2\)"),
    ("block 2", "data", 68 + 40, r"s.itr:3: checksum mismatch \(records 3-4\)"),
    ("block 2 checksum", "data", 68 + 67, r"s.itr:3: checksum mismatch \(records 3-4\)"),
    ("block 3", "data", 136, r"s.itr:5: checksum mismatch \(records 5-5\)"),
    ("block 3 checksum", "data", 136 + 33, r"s.itr:5: checksum mismatch \(records 5-5\)"),
]


def region_offset(data, base, delta):
    meta_len = struct.unpack_from("<I", data, 12)[0]
    return {"file": 0, "meta": 32, "meta_end": 32 + meta_len, "data": 36 + meta_len}[base] + delta


@pytest.mark.parametrize("region, base, delta, message", REGIONS, ids=[r[0] for r in REGIONS])
def test_a_flip_in_every_region_is_refused(tmp_path, region, base, delta, message):
    path = small_v2(tmp_path)
    data = bytearray(path.read_bytes())
    assert len(data) == region_offset(data, "data", 136 + 36)    # the layout REGIONS assumes
    data[region_offset(data, base, delta)] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(TraceError, match=f"^{re.escape(str(tmp_path))}/{message}$"):
        list(read_trace(path)[1])


def test_every_byte_is_covered(tmp_path):
    """Version 2 has no don't-care byte: inverting any one byte of the file is refused."""
    data = small_v2(tmp_path).read_bytes()
    path = tmp_path / "f.itr"
    for offset in range(len(data)):
        damaged = bytearray(data)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        assert refusal(path), f"byte {offset} inverted and accepted"


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_change_of_up_to_four_bytes_is_refused(tmp_path_factory, data):
    """Any change of one to four consecutive bytes is refused (a CRC-32 detects every burst
    of up to 32 bits). A byte outside every checksum, if the format had one, could only pass by
    leaving the trace as it was; version 2 has none, so every change is refused."""
    path = small_v2(tmp_path_factory.mktemp("v2"))
    original = path.read_bytes()
    offset = data.draw(st.integers(0, len(original) - 1), label="offset")
    width = data.draw(st.integers(1, min(4, len(original) - offset)), label="width")
    new = data.draw(st.binary(min_size=width, max_size=width)
                    .filter(lambda b: b != original[offset:offset + width]), label="bytes")
    path.write_bytes(original[:offset] + new + original[offset + width:])
    message = refusal(path)
    assert message is not None, "a changed trace was accepted"
    assert message.startswith(f"{path}:")


def test_truncation_is_refused(tmp_path):
    data = small_v2(tmp_path).read_bytes()
    path = tmp_path / "t.itr"
    for length in range(len(data)):
        path.write_bytes(data[:length])
        assert refusal(path), f"cut to {length} bytes and accepted"
    start = region_offset(data, "data", 0)
    for length, message in [
        (start + 100, f"{path}:3: truncated (records 3-4: 32 of 68 bytes)"),
        (start + 136, f"{path}:5: truncated (records 5-5: 0 of 36 bytes)"),
        (len(data) - 1, f"{path}:5: truncated (records 5-5: 35 of 36 bytes)"),
    ]:
        path.write_bytes(data[:length])
        assert refusal(path) == message


def test_trailing_bytes_are_refused(tmp_path):
    path = small_v2(tmp_path)
    path.write_bytes(path.read_bytes() + b"\x00")
    assert refusal(path) == f"{path}:6: trailing bytes (1 after the last of 5 records)"


def test_v1_files_still_read(tmp_path):
    path = write_v1(tmp_path / "old.itr", META, FIVE)
    meta, records = read_trace(path)
    assert meta["format_version"] == 1 and list(records) == FIVE
    summary = trace_summary(path)
    assert (summary["version"], summary["form"], summary["checksums"]) == \
        (1, "binary", "none (version 1)")


def test_summary_names_the_checksums(tmp_path):
    write_trace(tmp_path / "t.itr", META, FIVE)
    write_trace(tmp_path / "t.txt", META, FIVE)
    binary, text = trace_summary(tmp_path / "t.itr"), trace_summary(tmp_path / "t.txt")
    assert (binary["version"], binary["form"], binary["checksums"]) == \
        (3, "binary", f"crc32 per {BLOCK_RECORDS} records, header and metadata")
    assert (text["version"], text["form"], text["checksums"]) == (3, "text", "none (text form)")
    assert binary["records"] == text["records"] == 5


def test_text_form_versions(tmp_path):
    """The text form is written as version 3 and read as 1, 2, 3 or 4 (the same text)."""
    write_trace(tmp_path / "t.txt", META, FIVE)
    assert (tmp_path / "t.txt").read_text().startswith("innet-trace 3 {")
    old = write_text(tmp_path, [r.to_text() for r in FIVE])       # an "innet-trace 1" header
    assert list(read_trace(old)[1]) == FIVE
    old.write_text(old.read_text().replace("innet-trace 1", "innet-trace 2", 1))
    assert list(read_trace(old)[1]) == FIVE
    old.write_text(old.read_text().replace("innet-trace 2", "innet-trace 4", 1))
    assert list(read_trace(old)[1]) == FIVE
    old.write_text(old.read_text().replace("innet-trace 4", "innet-trace 5", 1))
    assert refusal(old) == f"{old}:1: version: '5' is not supported (this reader: 1, 2, 3, 4)"


def test_writing_sets_the_version_and_checks_its_arguments(tmp_path):
    write_trace(tmp_path / "t.itr", {**META, "format_version": 1}, FIVE)
    assert read_trace(tmp_path / "t.itr")[0]["format_version"] == 3
    with pytest.raises(ValueError, match="block_records must be in"):
        write_trace(tmp_path / "u.itr", META, FIVE, block_records=0)
    with pytest.raises(ValueError, match="fmt must be 'binary' or 'text', not 'csv'"):
        write_trace(tmp_path / "u.itr", META, FIVE, fmt="csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.itr"]


# -- version 4: wait records --------------------------------------------------------------

#: a tree's parent (GPU 1) waits for both of its children's messages
TREE = [
    TraceRecord.grad(gpu=0, peer=1, id=0, time_ns=0, bytes=64, algo="tree"),
    TraceRecord.grad(gpu=2, peer=1, id=1, time_ns=0, bytes=64, algo="tree"),
    TraceRecord.mem(gpu=3, peer=1, id=2, time_ns=5, bytes=8),
    TraceRecord.grad(gpu=1, peer=3, id=3, time_ns=0, bytes=64, algo="tree",
                     dependency=0).with_dependencies((0, 1, 2)),
]


def test_grad_takes_its_dependencies_at_construction():
    """``grad(dependencies=...)`` is the record ``with_dependencies`` makes, in one step; one
    dependency may be given either way, and both at once is refused."""
    kw = dict(gpu=1, peer=3, id=3, time_ns=7, bytes=64, algo="tree", bucket=2, chunk=5, job=1,
              route="pcie-nic-leaf-nic-pcie")
    assert TraceRecord.grad(**kw, dependencies=(0, 1, 2)) == \
        TraceRecord.grad(**kw).with_dependencies((0, 1, 2))
    assert TraceRecord.grad(**kw, dependencies=[4]) == TraceRecord.grad(**kw, dependency=4)
    assert TraceRecord.grad(**kw, dependencies=()).dependencies == ()
    with pytest.raises(ValueError, match="not both"):
        TraceRecord.grad(**kw, dependency=0, dependencies=(1,))


def test_v4_layout_is_the_documented_one(tmp_path):
    """A record with several dependencies is written as itself (its first dependency in
    ``b``) and a wait record per further one (type 4, its gpu and id, the dependency in
    ``b``, every other field 0), in version 2's layout with version 4 in the header and the
    metadata; it reads back as the one record."""
    path = tmp_path / "t.itr"
    assert write_trace(path, META, TREE, block_records=2) == 6
    wait = lambda dep: struct.pack("<BBHHHHHIQII", WAIT, 0, 1, 0, 0, 0, 0, 3, 0, 0, dep)  # noqa
    plain = [r.pack() for r in TREE[:3]] + [TREE[3].with_dependency(0).pack()]
    body = b"".join(plain) + wait(1) + wait(2)
    assert path.read_bytes() == v2_bytes(meta_json(version=WAIT_VERSION), body, 2, 6,
                                         version=WAIT_VERSION)
    meta, records = read_trace(path)
    assert meta["format_version"] == WAIT_VERSION == 4
    records = list(records)
    assert records == TREE and records[3].dependencies == (0, 1, 2)
    assert trace_summary(path)["by_type"]["wait"] == 2


def test_v4_text_form(tmp_path):
    path = tmp_path / "t.txt"
    write_trace(path, META, TREE)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("innet-trace 4 ")
    assert lines[-2:] == ["wait gpu=1 id=3 dep=1", "wait gpu=1 id=3 dep=2"]
    assert list(read_trace(path)[1]) == TREE


def test_one_dependency_each_stays_version_3(tmp_path):
    """Without a record of several dependencies the writer's bytes are version 3's."""
    path = tmp_path / "t.itr"
    write_trace(path, META, TREE[:3])
    body = b"".join(r.pack() for r in TREE[:3])
    assert path.read_bytes() == v2_bytes(meta_json(version=VERSION), body, BLOCK_RECORDS, 3,
                                         version=VERSION)


def test_a_record_of_several_dependencies_names_them_all():
    with pytest.raises(ValueError, match="record 3 waits for 3 records: read its dependencies"):
        TREE[3].dependency
    assert TREE[0].dependencies == () and TREE[3].with_dependency(None).dependencies == ()


GRAD_LINE = "grad gpu=1 peer=3 id=3 time_ns=0 bytes=8 algo=tree dep=0"


@pytest.mark.parametrize("lines, message", [
    (["wait gpu=1 id=3 dep=0"], r"bad.txt:2: wait: follows no mem or grad record with a "
                                r"dependency$"),
    (["kernel gpu=0 id=0 start_ns=0 dur_ns=1 phase=bwd", "wait gpu=0 id=0 dep=0"],
     r"bad.txt:3: wait: follows no mem or grad record"),
    (["grad gpu=0 peer=1 id=0 time_ns=0 bytes=8 algo=tree",
      "grad gpu=1 peer=3 id=3 time_ns=0 bytes=8 algo=tree", "wait gpu=1 id=3 dep=0"],
     r"bad.txt:4: wait: follows no mem or grad record with a dependency$"),
    (["grad gpu=0 peer=1 id=0 time_ns=0 bytes=8 algo=tree", GRAD_LINE, "wait gpu=1 id=3 dep=9"],
     r"bad.txt:4: dep: 9 does not name an earlier record$"),
    (["grad gpu=0 peer=1 id=0 time_ns=0 bytes=8 algo=tree", GRAD_LINE, "wait gpu=1 id=3 dep=3"],
     r"bad.txt:4: dep: 3 does not name an earlier record$"),
    (["grad gpu=0 peer=1 id=0 time_ns=0 bytes=8 algo=tree", GRAD_LINE, "wait gpu=1 id=4 dep=0"],
     r"bad.txt:4: id: gpu=1 id=4 is not the record it follows \(gpu=1 id=3\)$"),
    (["grad gpu=0 peer=1 id=0 time_ns=0 bytes=8 algo=tree", GRAD_LINE, "wait gpu=1 id=3"],
     r"bad.txt:4: dep: missing$"),
])
def test_v4_malformed_waits(tmp_path, lines, message):
    path = tmp_path / "bad.txt"
    path.write_text(f"innet-trace 4 {json.dumps(META)}\n" + "\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=message):
        list(read_trace(path)[1])


def test_wait_records_need_version_4(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text(f"innet-trace 3 {json.dumps(META)}\n"
                    "grad gpu=0 peer=1 id=0 time_ns=0 bytes=8 algo=tree\n"
                    f"{GRAD_LINE}\nwait gpu=1 id=3 dep=0\n")
    with pytest.raises(TraceError, match=r"bad.txt:4: type: unknown record type 4$"):
        list(read_trace(path)[1])


def test_v4_binary_wait_first_is_refused(tmp_path):
    """A binary file whose first record is a wait record: one clear error, also from the
    command line (one line, exit 2)."""
    path = tmp_path / "bad.itr"
    wait = struct.pack("<BBHHHHHIQII", WAIT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    path.write_bytes(v2_bytes(meta_json(version=4), wait, 1, 1, version=4))
    with pytest.raises(TraceError, match=r"bad.itr:1: wait: follows no mem or grad record"):
        list(read_trace(path)[1])
    done = subprocess.run([sys.executable, "-m", "sim.cli", "trace", "info", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "wait: follows no" in done.stderr

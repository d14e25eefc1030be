"""The fast model's compiled core: :mod:`sim.model.switch` in C (``switch_core.c``).

The Python model spends ~20 µs per packet in interpreter overhead spread evenly over its event
handlers; the C core runs the same events, statement for statement, about 30 times faster
(300 times faster than the RTL replay; docs/metrics.md). Both must agree exactly:
``tests/test_switch_core.py`` replays random traces (every policy, reads, reductions,
dependency chains) through both and compares every injection, delivery, result, message
completion, stall and flit count.

The shared library is compiled on first use with the system C compiler (``$CC``, else
``cc``; the compiler Verilator needs) into the user cache, keyed by the source and the
command, and loaded with :mod:`ctypes`. :class:`CoreUnavailable` says why when it cannot be.

The entry point takes one struct, ``SwitchArgs``, mirrored here by :class:`SwitchArgs`; the
library describes its own (``innet_switch_args``: field names and types in order,
``innet_switch_args_size``), and :func:`library` refuses a library whose struct differs.
"""

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from hw.arbiter import DEFICIT_BITS
from hw.packet import Kind
from hw.spec import Policy
from sim.files import cache_dir
from sim.replay.pages import paused_gc, small_pages
from sim.replay.plan import PACKET_DTYPE, SMALL_DTYPE, Message, Plan
from sim.replay.result import ReplayResult, ResultCycles

__all__ = ["CoreUnavailable", "SwitchArgs", "check_args", "library", "library_args",
           "run_core"]

SOURCE = Path(__file__).with_name("switch_core.c")
FLAGS = ["-O3", "-std=c11", "-shared", "-fPIC"]
#: Tried first, and dropped when the compiler refuses them: code for this machine's CPU (the
#: library is built where it runs). BERT-large in-switch's C call: -O2 9.8 to 10.1 CPU s,
#: -O3 8.1 to 8.3, -O3 with these 7.9 (docs/replay.md).
TUNED = ["-march=native"]
#: The entry point's scalar parameters, in ``SwitchArgs`` order (``SWITCH_ARGS`` in
#: switch_core.c).
PARAMS = ("ports", "depth", "result_lag", "result_depth", "chunk_flits", "slots", "policy",
          "quantum", "deficit_bits", "members", "chunks", "mtu", "packets", "packet_cap",
          "messages", "message_cap", "ingress_latency", "pick_latency", "round_trip",
          "hold_depth", "judge_phase", "egress_pick_lag", "egress_out_lag", "engine_restart",
          "hold_read")
#: The entry point's arrays, in ``SwitchArgs`` order after the parameters: int64 but for
#: :data:`PACKET_ARRAYS`.
ARRAYS = ("priority", "weight", "pk_flits", "pk_dst", "pk_seq", "pk_msg",
          "m_src", "m_dst", "m_issue", "m_kind", "m_resp_flits", "m_resp_to", "m_ndeps",
          "m_pk_off", "m_pk_len", "wait_off", "wait_list", "con_off", "con_first", "con_mid",
          "inject", "deliver", "results", "done_at", "out_flits", "in_flits", "stall",
          "counters", "chunk_start")
#: The plan's packet arrays, of the plan's types (``int32_t`` in switch_core.c, ``int8_t``
#: for the destination port): a whole iteration is tens of millions of packets.
PACKET_ARRAYS = {"pk_flits": PACKET_DTYPE, "pk_dst": SMALL_DTYPE, "pk_seq": PACKET_DTYPE,
                 "pk_msg": PACKET_DTYPE}
K_OTHER, K_READ_REQ, K_READ_RESP = 0, 1, 2


class CoreUnavailable(RuntimeError):
    """The C core cannot be built or loaded here (no C compiler, it failed, or the library's
    argument struct is not :class:`SwitchArgs`)."""


class SwitchArgs(ctypes.Structure):
    """The C entry point's argument: :data:`PARAMS` as int64, then :data:`ARRAYS` as pointers
    to int64 (switch_core.c's ``SwitchArgs``, checked by :func:`check_args`)."""

    _fields_ = ([(name, ctypes.c_int64) for name in PARAMS]
                + [(name, ctypes.c_void_p) for name in ARRAYS])


def _cache_dir():
    return cache_dir("model")


@functools.lru_cache(maxsize=1)
def library():
    """The loaded core, compiled first if the cache has no build of this source."""
    compiler = os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        raise CoreUnavailable(f"no C compiler ({compiler!r} not found; set CC)")
    text = SOURCE.read_bytes()
    # The CPU is in the key: a cache shared by machines never hands one a library tuned for
    # another.
    key = hashlib.sha256(text + " ".join([compiler] + FLAGS + TUNED).encode()
                         + _host_cpu()).hexdigest()[:16]
    target = _cache_dir() / f"switch_core-{key}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        # Build beside the target and rename: concurrent first uses (pytest -n) never load
        # a half-written library.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            for flags in (FLAGS + TUNED, FLAGS):
                done = subprocess.run([compiler, *flags, "-o", tmp, str(SOURCE)],
                                      capture_output=True, text=True)
                if not done.returncode:
                    break
            if done.returncode:
                first = (done.stderr.strip().splitlines() or ["no output"])[0]
                raise CoreUnavailable(f"{compiler} failed on {SOURCE.name}: {first}")
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as e:
        raise CoreUnavailable(f"cannot load {target}: {e}") from None
    check_args(lib, SwitchArgs)
    lib.innet_switch_run.restype = ctypes.c_int
    lib.innet_switch_run.argtypes = [ctypes.POINTER(SwitchArgs)]
    return lib


def _host_cpu():
    """What identifies this machine's CPU for :data:`TUNED` code: its model and feature flags
    (Linux's /proc/cpuinfo), else the platform's processor name."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    fields = [line for line in lines if line.split(":")[0].strip() in ("model name", "flags")]
    return "\n".join(dict.fromkeys(fields) or [platform.machine(), platform.processor()]).encode()


#: How a field's type is compared across the boundary: ``"i64"`` or ``"pointer"``.
_KINDS = {ctypes.c_int64: "i64", ctypes.c_void_p: "pointer"}


def library_args(lib):
    """``(fields, size)``: the fields of ``lib``'s ``SwitchArgs`` as the library reports them,
    in order, as ``(name, "i64" or "pointer")``, and the struct's size in bytes.

    Raises
    ------
    CoreUnavailable
        The library does not describe its argument struct.
    """
    try:
        describe, size = lib.innet_switch_args, lib.innet_switch_args_size
    except AttributeError:
        raise CoreUnavailable(f"{SOURCE.name} does not describe its argument struct "
                              "(no innet_switch_args)") from None
    describe.restype, describe.argtypes = ctypes.c_char_p, []
    size.restype, size.argtypes = ctypes.c_int64, []
    fields = [line.split(" ", 1) for line in describe().decode().splitlines()]
    return [(name, "pointer" if ctype.endswith("*") else ctype) for name, ctype in fields], size()


def check_args(lib, args=SwitchArgs):
    """Check that ``lib``'s ``SwitchArgs`` is ``args`` (a :class:`ctypes.Structure`): the same
    field names in the same order, each an int64 or a pointer alike, the same size; and that
    its policy codes are :class:`hw.spec.Policy`'s, in order.

    Raises
    ------
    CoreUnavailable
        Naming the first field that differs, or the sizes.
    """
    theirs, size = library_args(lib)
    ours = [(name, _KINDS.get(ctype, ctype.__name__)) for name, ctype in args._fields_]
    where = f"{SOURCE.name}'s SwitchArgs and {Path(__file__).name}'s {args.__name__}"
    for i, (c, py) in enumerate(zip(theirs, ours)):
        if c != py:
            raise CoreUnavailable(f"{where} differ at field {i}: {' '.join(c)} in C, "
                                  f"{' '.join(py)} in Python")
    if len(theirs) != len(ours):
        raise CoreUnavailable(f"{where} differ in length: {len(theirs)} fields in C, "
                              f"{len(ours)} in Python")
    if size != ctypes.sizeof(args):
        raise CoreUnavailable(f"{where} differ in size: {size} bytes in C, "
                              f"{ctypes.sizeof(args)} in Python")
    try:
        names = lib.innet_switch_policies
    except AttributeError:
        raise CoreUnavailable(f"{SOURCE.name} does not name its policies "
                              "(no innet_switch_policies)") from None
    names.restype, names.argtypes = ctypes.c_char_p, []
    theirs = tuple(names().decode().split())
    if theirs != Policy.names():
        raise CoreUnavailable(f"{SOURCE.name}'s policy codes {theirs} are not hw.spec.Policy's "
                              f"{Policy.names()}")


def _padded(a, cap, fill=0, dtype=np.int64):
    """``a`` as ``dtype``, padded with ``fill`` to ``cap`` entries (room for read responses);
    ``a`` itself when it needs no room and is already a contiguous array of ``dtype`` (the
    core writes only the entries past ``len(a)``)."""
    if cap == len(a):
        return np.ascontiguousarray(a, dtype=dtype)
    out = np.empty(cap, dtype=dtype)
    out[:len(a)] = a
    out[len(a):] = fill
    return out


def _message_arrays(plan):
    """The plan's messages as arrays, with room for the read responses the replay creates."""
    msgs = plan.messages
    m0 = len(msgs)
    read_req, read_resp = Kind.MEM_READ_REQ, Kind.MEM_READ_RESP
    rows = np.fromiter(
        ((m.src, m.dst, m.issue, len(m.deps), m.response_flits, m.response_to,
          K_READ_REQ if m.kind is read_req else K_READ_RESP if m.kind is read_resp else K_OTHER,
          m.packets.start, len(m.packets)) for m in msgs),
        dtype=np.dtype((np.int64, 9)), count=m0).reshape(m0, 9)
    src, dst, issue, ndeps, resp_flits, resp_to, kind, offs, lens = rows.T
    mtu = plan.config.mtu_flits
    reads = (kind == K_READ_REQ) & (resp_flits > 0)
    extra_msgs = int(reads.sum())
    extra_pkts = int((-(-resp_flits[reads] // mtu)).sum())
    m_cap, p_cap = m0 + extra_msgs, plan.packets + extra_pkts
    # Dependants of each message, in message order (ClosedLoop.waiting).
    dep = np.fromiter((d for m in msgs for d in m.deps), np.int64, int(ndeps.sum()))
    has = np.repeat(np.arange(m0, dtype=np.int64), ndeps)
    waiters = has[np.argsort(dep, kind="stable")]
    wait_off = np.concatenate([[0], np.cumsum(np.bincount(dep, minlength=m0))])
    return {
        "m_src": _padded(src, m_cap), "m_dst": _padded(dst, m_cap),
        "m_issue": _padded(issue, m_cap), "m_kind": _padded(kind, m_cap),
        "m_resp_flits": _padded(resp_flits, m_cap),
        "m_resp_to": _padded(resp_to, m_cap, -1), "m_ndeps": _padded(ndeps, m_cap),
        "m_pk_off": _padded(offs, m_cap), "m_pk_len": _padded(lens, m_cap),
        "wait_off": wait_off.astype(np.int64),
        "wait_list": waiters.astype(np.int64),
    }, m_cap, p_cap


def _contributions(plan, arrays, m0, ports):
    """Each port's contribution messages sorted by their first chunk (a message sends the
    consecutive chunks ``first, first + 1, …``): ``con_off`` (per port, offsets into the
    others; ``ports + 1``), ``con_first`` (first chunk), ``con_mid`` (message id). The core
    finds the message sending chunk ``seq`` of a port there (ClosedLoop's ``chunk_msg``)."""
    offs, lens = arrays["m_pk_off"][:m0], arrays["m_pk_len"][:m0]
    mids = np.nonzero(lens > 0)[0]
    mids = mids[plan.seq[offs[mids]] >= 0]
    first = plan.seq[offs[mids]]
    if np.any(plan.seq[offs[mids] + lens[mids] - 1] != first + lens[mids] - 1):
        raise ValueError("a contribution message's chunks are not consecutive")
    src = arrays["m_src"][mids]
    order = np.lexsort((first, src))
    counts = np.bincount(src, minlength=ports)
    return {"con_off": np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            "con_first": np.ascontiguousarray(first[order], dtype=np.int64),
            "con_mid": np.ascontiguousarray(mids[order], dtype=np.int64)}


def _pack(values):
    """``values`` (every :class:`SwitchArgs` field by name: an int, or a C-contiguous array,
    int64 or, for :data:`PACKET_ARRAYS`, the plan's packet types) as a :class:`SwitchArgs`."""
    names = [name for name, _ in SwitchArgs._fields_]
    if set(values) != set(names):
        raise ValueError(f"SwitchArgs fields missing {sorted(set(names) - set(values))}, "
                         f"unknown {sorted(set(values) - set(names))}")
    args = SwitchArgs()
    for name in names:
        v = values[name]
        if isinstance(v, np.ndarray):
            want = np.dtype(PACKET_ARRAYS.get(name, np.int64))
            if v.dtype != want or not v.flags.c_contiguous:
                raise ValueError(f"SwitchArgs.{name} must be a contiguous {want} array")
            v = v.ctypes.data
        setattr(args, name, v)
    return args


def run_core(model, plan):
    """Replay ``plan`` through the C core with the parameters of ``model`` (a
    :class:`sim.model.switch.FastSwitch`); the same :class:`ReplayResult` the Python model
    returns."""
    lib = library()
    # the outputs of a whole iteration are GBs of fresh memory and 100,000s of objects
    with small_pages(), paused_gc():
        return _run(lib, model, plan)


def _run(lib, model, plan):
    began = time.perf_counter()
    cfg = plan.config
    N, C = model.N, max(plan.chunks, 1)
    arrays, m_cap, p_cap = _message_arrays(plan)
    n0, m0 = plan.packets, len(plan.messages)

    pk = {name: _padded(a, p_cap, fill, PACKET_ARRAYS[name]) for name, a, fill in (
        ("pk_flits", plan.flits, 0), ("pk_dst", plan.dst, 0), ("pk_seq", plan.seq, -1),
        ("pk_msg", plan.msg, 0))}
    con = _contributions(plan, arrays, m0, N)
    arb = model.arbiters[0]
    values = {"ports": N, "depth": model.depth, "result_lag": model.result_lag,
              "result_depth": model.result_depth, "chunk_flits": cfg.chunk_flits,
              "slots": cfg.slots, "policy": Policy.names().index(arb.policy.value),
              "quantum": arb.quantum, "deficit_bits": DEFICIT_BITS, "members": plan.members,
              "chunks": C, "mtu": cfg.mtu_flits, "packets": n0, "packet_cap": p_cap,
              "messages": m0, "message_cap": m_cap,
              "ingress_latency": cfg.switch.ingress_latency,
              "pick_latency": cfg.switch.engine_pick_latency,
              "round_trip": 2 * cfg.link_cycles,
              "hold_depth": cfg.switch.judge_hold_flits, "hold_read": cfg.switch.hold_read_latency,
              "judge_phase": model.judge_phase,
              "egress_pick_lag": cfg.switch.egress_pick_latency,
              "egress_out_lag": cfg.switch.egress_output_latency,
              "engine_restart": cfg.switch.engine_restart_cycles}
    # Only memory packets are delivered (a message with a destination and the read responses
    # to one): without any (in-switch traffic), the core never writes `deliver` and the
    # result's is a read-only view of -1s, not hundreds of MB of fresh memory.
    delivers = bool((arrays["m_dst"][:m0] >= 0).any())
    out = {"inject": np.full(p_cap, -1, np.int64),
           "deliver": np.full(p_cap if delivers else 1, -1, np.int64),
           "results": np.full(N * C, -1, np.int64), "done_at": np.full(m_cap, -1, np.int64),
           "out_flits": np.zeros(N, np.int64), "in_flits": np.zeros(N, np.int64),
           "stall": np.zeros(N, np.int64), "counters": np.zeros(4, np.int64),
           "chunk_start": np.full(C, -1, np.int64)}
    # Per egress, per requester (requester d of egress d: the reduction results).
    priority = np.array([a.priority for a in model.arbiters], np.int64)
    weight = np.array([a.weight for a in model.arbiters], np.int64)
    args = _pack(values | {"priority": priority, "weight": weight} | con | pk | arrays | out)
    status = lib.innet_switch_run(ctypes.byref(args))
    if status == 2:
        raise RuntimeError("the switch model's C core saw a chunk's contributions arrive "
                           "before those of the chunk using its slot before it were all in")
    if status:
        raise MemoryError("the switch model's C core ran out of memory")
    npk, nmsg = (int(v) for v in out["counters"][:2])
    if delivers:
        deliver = out["deliver"][:npk]
    else:
        if out["deliver"][0] != -1:
            raise RuntimeError("the switch model's C core delivered a packet of a plan "
                               "without memory packets")
        deliver = np.broadcast_to(np.int64(-1), (npk,))
    plan = _with_responses(plan, arrays, pk, npk, nmsg)
    results = ResultCycles(out["results"].reshape(N, C)[:, :plan.chunks])
    done = out["done_at"][:nmsg]
    mids = np.nonzero(done >= 0)[0]
    message_done = dict(zip(mids.tolist(), done[mids].tolist()))
    return ReplayResult.build(
        "model", plan, message_done, out["inject"][:npk], deliver, results,
        egress_flits=out["out_flits"].tolist(), ingress_flits=out["in_flits"].tolist(),
        stall_cycles=out["stall"].tolist(), chunk_start=out["chunk_start"][:plan.chunks],
        wall_s=time.perf_counter() - began,
        extra={"core": "c", "events": int(out["counters"][3])})


def _with_responses(plan, arrays, pk, npk, nmsg):
    """The plan grown by the read responses the replay sent (as ClosedLoop grows its copy):
    the input plan itself when there were none."""
    m0, n0 = len(plan.messages), plan.packets
    if nmsg == m0:
        return plan
    new = slice(n0, npk)
    messages = list(plan.messages)
    for mid in range(m0, nmsg):
        req = plan.messages[int(arrays["m_resp_to"][mid])]
        off, n = int(arrays["m_pk_off"][mid]), int(arrays["m_pk_len"][mid])
        resp = Message(mid, req.dst, Kind.MEM_READ_RESP, req.src, int(arrays["m_issue"][mid]),
                       (), req.record, packets=range(off, off + n))
        resp.response_to = req.mid
        messages.append(resp)
    kind = np.full(npk - n0, Kind.MEM_READ_RESP.value, dtype=plan.kind.dtype)

    def cat(arrays):   # of the plan's packet type
        return np.concatenate(arrays, dtype=arrays[0].dtype, casting="same_kind")

    return Plan(plan.config, plan.gpus, messages,
                cat([plan.src, arrays["m_src"][pk["pk_msg"][new]]]),
                cat([plan.dst, pk["pk_dst"][new]]), cat([plan.kind, kind]),
                cat([plan.flits, pk["pk_flits"][new]]), cat([plan.msg, pk["pk_msg"][new]]),
                cat([plan.seq, pk["pk_seq"][new]]), plan.members, plan.chunks, dict(plan.meta))

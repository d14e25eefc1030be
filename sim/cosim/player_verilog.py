"""The Verilog packet player: a simulation-only harness around the exported switch that moves
every flit in Verilog, so the co-simulation's Python runs per packet event, not per cycle.

Per ingress, a **player** presents the packet of a descriptor Python wrote (one write per
packet; two slots, so Python can queue the next packet while one plays): it generates the
payload itself — memory packets from :func:`sim.cosim.stimulus.memory_words`'s formula,
reduction contributions from :func:`sim.cosim.stimulus.hashed_contribution_words`'s hash — and
walks its flits honouring ``tready``. Per egress, a **monitor** checks a memory packet's payload
against the same formula (the packet id read back from ``tuser`` as
:func:`sim.cosim.stimulus.user_pid` does), checks that the header stays the same on every flit,
folds the payload into a 64-bit digest (for reduction results; Python compares it with the
digest of the numpy golden sum), drives ``tready`` (optionally with pseudo-random stalls), and
writes one line per packet to a log. Python is woken (``attn``, and ``wake_n`` falling) only in
the cycle after an ingress went idle with nothing queued (unless Python ``hush``-ed it: it would
find nothing to start), after an egress delivered a reduction result or a memory packet Python
must see online (``tell``: the last of its message), or at a cycle it asked for (``wake_at``).
The monitor knows a memory packet's ``tell`` bit from a queue per (ingress, egress) pair, filled
as the packets start: a pair's packets arrive in the order they left.

The formulas' constants and the packet id's fields come from :mod:`sim.cosim.stimulus`, where
the Python generators use the same ones; every replay also checks the two sides against each
other (a payload flag or a digest that disagrees is a mismatch), so a drift cannot pass
silently. The switch is instantiated from its exported Verilog unchanged: the RTL under test
is the one users export.
"""

import re

from hw.packet import PORT_BITS, Kind
from sim.cosim.stimulus import (BF16_HASH_XOR, CONTRIBUTION_HASH, FMIX32_MULTIPLIERS,
                                FNV_INIT, FNV_PRIME, FP_EXPONENT_BASE, FP_EXPONENT_SPAN_BITS,
                                INT_SPAN_BITS, MEMORY_HASH, PID_BITS, PID_FIELDS)

__all__ = ["DESC_FIELDS", "desc_width", "render_player", "schedule_lines", "tell_depth"]

RESULT = Kind.REDUCE_RESULT.value

#: The descriptor a player takes, low bit first: ``(name, width)``; ``user`` is the switch's
#: tuser width. ``tag`` toggles with every new descriptor (a new packet to play); ``contrib``
#: selects the contribution generator (key = chunk sequence) over the memory formula (key =
#: packet id, :data:`sim.cosim.stimulus.PID_BITS` wide); ``last`` is the flit count minus one;
#: ``tell``: Python must see this memory packet's delivery online (it ends its message); the
#: others reach Python only through the log, so their deliveries wake nothing. ``at``: the
#: first cycle the packet may start (0: as soon as it is its slot's turn), so Python can give
#: a packet it knows will start later, such as a contribution waiting for its slot's credit,
#: without waking at that cycle.
DESC_FIELDS = (("tag", 1), ("contrib", 1), ("tell", 1), ("last", 16), ("dst", PORT_BITS),
               ("key", PID_BITS), ("at", 32))

def tell_depth(chunk_flits):
    """Memory packets each (ingress, egress) pair's tell queue holds in flight: a power of two
    above what the switch can buffer between an ingress and an egress (a packet is at least a
    flit; the ingress FIFO holds ``max(16, 2 × chunk_flits)`` flits, as the replays build it,
    and the crossbar and egress a few more), at least 256. An overflow is reported
    (``tell_lost``), not silent."""
    need = 4 * max(16, 2 * chunk_flits) + 64
    return max(256, 1 << (need - 1).bit_length())


def desc_width(user_bits):
    return sum(w for _, w in DESC_FIELDS) + user_bits


def schedule_lines(entries, user_bits):
    """The ``$readmemh`` text of one port's schedule (:func:`render_player` with
    ``schedule``): ``entries`` are ``(cycle, descriptor)`` in the order played, the cycle in the
    word's top 32 bits; a last word of all-ones cycle ends it."""
    width = desc_width(user_bits)
    digits = (width + 32 + 3) // 4
    lines = [f"{cycle << width | desc:0{digits}x}" for cycle, desc in entries]
    lines.append(f"{0xFFFFFFFF << width:0{digits}x}")
    return "\n".join(lines) + "\n"


def _field(meta, name):
    for f in meta["tuser_layout"]:
        if f["name"] == name:
            return f["offset"], f["width"]
    raise KeyError(name)


def _pid_expr(user):
    """Verilog of the packet id that the ``tuser`` value ``user`` carries
    (:func:`sim.cosim.stimulus.user_pid`)."""
    return "{" + ", ".join(f"{user}[{offset + width - 1}:{offset}]"
                           for _, offset, width in PID_FIELDS) + "}"


def _constants():
    s, q, p, f, ln = CONTRIBUTION_HASH
    span = FP_EXPONENT_SPAN_BITS
    return {"fmix1": FMIX32_MULTIPLIERS[0], "fmix2": FMIX32_MULTIPLIERS[1],
            "c_seed": s, "c_seq": q, "c_port": p, "c_flit": f, "c_lane": ln,
            "bf16_xor": BF16_HASH_XOR, "m_pid": MEMORY_HASH[0], "m_flit": MEMORY_HASH[1],
            "m_lane": MEMORY_HASH[2], "prime": FNV_PRIME,
            "exp_base": FP_EXPONENT_BASE, "exp_pad": 8 - span, "exp_hi": 23 + span - 1,
            "int_pad": 32 - INT_SPAN_BITS, "int_hi": INT_SPAN_BITS - 1,
            "int_half": 1 << (INT_SPAN_BITS - 1)}


_FUNCTIONS = """\
  // murmur3's 32-bit finaliser (sim.cosim.stimulus.fmix32)
  function automatic [31:0] fmix32(input [31:0] x);
    reg [31:0] h;
    begin
      h = x ^ (x >> 16);
      h = h * 32'h%(fmix1)08X;
      h = h ^ (h >> 13);
      h = h * 32'h%(fmix2)08X;
      fmix32 = h ^ (h >> 16);
    end
  endfunction

  // a float with a random sign and mantissa, magnitude in [2^-6, 2^2)
  // (sim.cosim.stimulus.fp_pattern)
  function automatic [31:0] fp_pattern(input [31:0] h);
    fp_pattern = {h[31], 8'd%(exp_base)d + {%(exp_pad)d'd0, h[%(exp_hi)d:23]}, h[22:0]};
  endfunction

  // member `port`'s word `lane` of flit `flit` of chunk `seq`
  // (sim.cosim.stimulus.hashed_contribution_words)
  function automatic [31:0] gen_word(input [31:0] s, input [31:0] seq, input [31:0] port,
                                     input [31:0] flit, input [31:0] lane, input [1:0] dt);
    reg [31:0] h, lo, hi;
    begin
      h = fmix32(s * 32'h%(c_seed)08X + seq * 32'h%(c_seq)08X + port * 32'h%(c_port)08X
                 + flit * 32'h%(c_flit)08X + lane * 32'h%(c_lane)08X);
      lo = fp_pattern(h);
      hi = fp_pattern(fmix32(h ^ 32'h%(bf16_xor)08X));
      case (dt)
        2'd0: gen_word = {%(int_pad)d'd0, h[%(int_hi)d:0]} - 32'h%(int_half)08X;
        2'd1: gen_word = lo;
        default: gen_word = {hi[31:16], lo[31:16]};
      endcase
    end
  endfunction

  // memory packet `pid`'s word (sim.cosim.stimulus.memory_words)
  function automatic [31:0] mem_word(input [31:0] pid, input [31:0] flit, input [31:0] lane);
    mem_word = pid * 32'h%(m_pid)08X + flit * 32'h%(m_flit)08X + lane * 32'h%(m_lane)08X;
  endfunction

  // FNV-1a over the flit's 32-bit lane words, lane 0 first (sim.cosim.stimulus.digest)
  function automatic [63:0] fold(input [63:0] h, input [DW-1:0] data);
    integer i;
    reg [63:0] x;
    begin
      x = h;
      for (i = 0; i < LANES; i = i + 1)
        x = (x ^ {32'd0, data[32*i +: 32]}) * 64'h%(prime)016X;
      fold = x;
    end
  endfunction
"""


def render_player(switch_meta, schedule=0):
    """Verilog of the player harness around the exported switch ``switch_meta`` describes
    (the sidecar of :func:`hw.export.export_switch`). Returns ``(verilog, module)``; the
    switch's own Verilog must be compiled with it.

    ``schedule`` (a depth, default 0: off) makes the players take their descriptors not from
    Python but from a schedule per port, loaded at start (``+innet_sched<k>=FILE``,
    ``$readmemh``; :func:`schedule_lines`): each descriptor with the cycle Python gave it in
    a co-simulation, played from that cycle on once the one before it has ended. The same
    traffic then runs with no Python in the loop, the reference ``innet bench cosim``
    measures the co-simulation against."""
    p = switch_meta["parameters"]
    N, L = p["ports"], p["lanes"]
    switch = switch_meta["module"]
    module = f"innet_{'scheduled' if schedule else 'player'}_{switch.removeprefix('innet_')}"
    widths = {q["name"]: q["width"] for q in switch_meta["ports"]}
    UW = widths["s0_axis_tuser"]
    PW = widths["s0_axis_tid"]
    DW = 32 * L
    D = desc_width(UW)
    TQ = tell_depth(p["chunk_flits"])
    for name, offset, width in PID_FIELDS:
        if _field(switch_meta, name) != (offset, width):
            raise ValueError(f"The switch's tuser field {name!r} is at "
                             f"{_field(switch_meta, name)}, not at {(offset, width)} as "
                             f"hw.packet.USER_LAYOUT has it: a stale export")
    kind_lo, kind_w = _field(switch_meta, "kind")
    kind_hi = kind_lo + kind_w - 1
    axis = re.compile(r"^[sm]\d+_axis_")
    through = [q for q in switch_meta["ports"]
               if q["name"] not in ("clk", "rst") and not axis.match(q["name"])]

    def rng(w):
        return f"[{w - 1}:0] " if w > 1 else ""

    ports = ["input clk", "input rst", "input run", "input flush", "input [1:0] dtype",
             "input [31:0] seed", "input [15:0] stall_threshold", "input [31:0] wake_at",
             f"input [{N - 1}:0] hush"]
    ports += [f"input [{2 * D - 1}:0] desc{k}" for k in range(N)]
    ports += ["output reg attn", "output wake_n", "output tell_lost",
              f"output [{31 + 4 * N}:0] ev",
              f"output [{N * UW - 1}:0] ev_user",
              f"output [{32 * N - 1}:0] ingress_flits", f"output [{32 * N - 1}:0] egress_flits",
              f"output [{32 * N - 1}:0] stall_cycles"]
    ports += [f"{'input' if q['direction'] == 'in' else 'output'} {rng(q['width'])}{q['name']}"
              for q in through]

    v = [f"// Generated by innet (sim.cosim.player_verilog) for {switch}: simulation only.",
         "/* verilator lint_off UNUSEDSIGNAL */",
         "/* verilator lint_off DECLFILENAME */",
         f"module {module} (", ",\n".join(f"  {x}" for x in ports), ");",
         f"  localparam LANES = {L};", f"  localparam DW = {DW};",
         _FUNCTIONS % _constants(),
         "  integer fd;",
         "  reg [8*512-1:0] log_path;",
         "  initial begin",
         "    fd = 0;",
         '    if ($value$plusargs("innet_log=%s", log_path)) fd = $fopen(log_path, "w");',
         "  end",
         "  reg [31:0] cycle, ev_cycle;",
         f"  reg [{N - 1}:0] in_end, out_end;",
         f"  wire [{N - 1}:0] in_end_now, in_idle_now, out_end_now, lost_tell;",
         "  assign tell_lost = |lost_tell;",
         f"  localparam TQ = {TQ};",
         f"  wire [{2 * N - 1}:0] done;",
         "  assign ev = {ev_cycle, done, out_end, in_end};",
         "  // falls with the clock only in a cycle Python must see: its one trigger a wake-up",
         "  assign wake_n = clk | ~attn;"]
    conn = [".clk(clk)", ".rst(rst)"] + [f".{q['name']}({q['name']})" for q in through]
    off = {}
    pos = 0
    for name, w in DESC_FIELDS:
        off[name] = (pos, w)
        pos += w
    off["user"] = (pos, UW)

    def f(k, name, slot=None):   # a field of the descriptor playing (or of slot 0 or 1)
        o, w = off[name]
        bus = f"cur{k}" if slot is None else f"desc{k}"
        o += D * (slot or 0)
        return f"{bus}[{o + w - 1}:{o}]" if w > 1 else f"{bus}[{o}]"

    for k in range(N):
        conn += [f".s{k}_axis_tvalid(act{k})", f".s{k}_axis_tready(s_ready{k})",
                 f".s{k}_axis_tdata(s_data{k})", f".s{k}_axis_tlast(s_last{k})",
                 f".s{k}_axis_tuser({f(k, 'user')})", f".s{k}_axis_tdest({f(k, 'dst')})",
                 f".s{k}_axis_tid({PW}'d{k})"]
        v += [f"  // ingress {k}'s tell queues, one per egress: the memory packets' tell bits in",
              "  // the order they start (a pair's packets arrive in the order they left)",
              f"  reg lost{k};", f"  assign lost_tell[{k}] = lost{k};"]
        for d in range(N):
            v += [f"  reg tq{k}_{d} [0:TQ-1];", f"  reg [{TQ.bit_length() - 2}:0] "
                  f"tw{k}_{d}, tr{k}_{d};"]
        if schedule:
            v += [f"  // ingress {k}: the player, its descriptors from a schedule (no Python)",
                  f"  reg [{D + 31}:0] sched{k} [0:{schedule - 1}];",
                  f"  reg [{max(1, (schedule - 1).bit_length()) - 1}:0] sidx{k};",
                  f"  reg [8*512-1:0] sched_path{k};",
                  f'  initial if ($value$plusargs("innet_sched{k}=%s", sched_path{k})) '
                  f"$readmemh(sched_path{k}, sched{k});",
                  f"  wire [{D + 31}:0] entry{k} = sched{k}[sidx{k}];",
                  f"  wire [{D - 1}:0] cur{k} = entry{k}[{D - 1}:0];",
                  f"  wire queued{k} = 1'b1;", f"  wire [1:0] done{k} = 2'd0;",
                  f"  wire act{k} = run & (entry{k}[{D + 31}:{D}] != 32'hFFFFFFFF) & "
                  f"(cycle >= entry{k}[{D + 31}:{D}]) & (cycle >= {f(k, 'at')});"]
        else:
            v += [f"  // ingress {k}: the player. Two descriptor slots, played in turn (`sel`): a",
                  "  // slot holds a packet to play while its tag differs from its `done`, so",
                  "  // Python can queue the next packet while this one plays.",
                  f"  reg sel{k};", f"  reg [1:0] done{k};",
                  f"  wire [{D - 1}:0] cur{k} = sel{k} ? desc{k}[{2 * D - 1}:{D}] : "
                  f"desc{k}[{D - 1}:0];",
                  f"  wire queued{k} = sel{k} ? {f(k, 'tag', 0)} != done{k}[0] : "
                  f"{f(k, 'tag', 1)} != done{k}[1];",
                  f"  wire act{k} = run & ({f(k, 'tag')} != done{k}[sel{k}]) & "
                  f"(cycle >= {f(k, 'at')});"]
        v += [f"  reg [15:0] pos{k};",
              f"  reg [31:0] in_flits{k}, in_stall{k};",
              f"  wire s_ready{k};", f"  wire [DW-1:0] s_data{k};",
              f"  wire s_last{k} = pos{k} == {f(k, 'last')};",
              f"  wire fire{k} = act{k} & s_ready{k};",
              f"  assign in_end_now[{k}] = fire{k} & s_last{k};",
              f"  assign in_idle_now[{k}] = fire{k} & s_last{k} & ~queued{k} & ~hush[{k}];",
              f"  assign done[{2 * k + 1}:{2 * k}] = done{k};",
              f"  assign ingress_flits[{32 * k + 31}:{32 * k}] = in_flits{k};",
              f"  assign stall_cycles[{32 * k + 31}:{32 * k}] = in_stall{k};"]
        for lane in range(L):
            v.append(f"  assign s_data{k}[{32 * lane + 31}:{32 * lane}] = {f(k, 'contrib')} ? "
                     f"gen_word(seed, {f(k, 'key')}, 32'd{k}, {{16'd0, pos{k}}}, 32'd{lane}, "
                     f"dtype) : mem_word({f(k, 'key')}, {{16'd0, pos{k}}}, 32'd{lane});")
        restart = f"sidx{k} <= 0;" if schedule else f"sel{k} <= 1'b0; done{k} <= 2'd0;"
        v += ["  always @(posedge clk) begin",
              f"    if (rst) begin {restart} pos{k} <= 16'd0; "
              f"in_flits{k} <= 32'd0; in_stall{k} <= 32'd0; lost{k} <= 1'b0; "
              + "".join(f"tw{k}_{d} <= 0; " for d in range(N)) + "end",
              "    else begin",
              f"      if (fire{k}) begin",
              f"        pos{k} <= s_last{k} ? 16'd0 : pos{k} + 16'd1;",
              f"        if (s_last{k}) sidx{k} <= sidx{k} + 1'b1;" if schedule else
              f"        if (s_last{k}) begin done{k}[sel{k}] <= {f(k, 'tag')}; "
              f"sel{k} <= ~sel{k}; end",
              f"        in_flits{k} <= in_flits{k} + 32'd1;",
              f'        if (pos{k} == 16\'d0 && fd != 0) $fwrite(fd, "i %0d {k}\\n", cycle);',
              f"        if (pos{k} == 16'd0 && !{f(k, 'contrib')}) case ({f(k, 'dst')})"]
        for d in range(N):
            v += [f"          {PW}'d{d}: begin tq{k}_{d}[tw{k}_{d}] <= {f(k, 'tell')}; "
                  f"tw{k}_{d} <= tw{k}_{d} + 1'b1; "
                  f"if (tw{k}_{d} + 1'b1 == tr{k}_{d}) lost{k} <= 1'b1; end"]
        v += ["          default: ;", "        endcase",
              "      end",
              f"      if (act{k} & ~s_ready{k}) in_stall{k} <= in_stall{k} + 32'd1;",
              "    end", "  end"]
    for d in range(N):
        conn += [f".m{d}_axis_tvalid(m_valid{d})", f".m{d}_axis_tready(m_ready{d})",
                 f".m{d}_axis_tdata(m_data{d})", f".m{d}_axis_tlast(m_last{d})",
                 f".m{d}_axis_tuser(m_user{d})", f".m{d}_axis_tdest(m_dest{d})",
                 f".m{d}_axis_tid(m_id{d})"]
        words = " , ".join(f"mem_word(pid{d}, {{16'd0, ocnt{d}}}, 32'd{lane})"
                           for lane in reversed(range(L)))
        v += [f"  // egress {d}: the monitor",
              f"  wire m_valid{d}, m_last{d};", f"  wire [DW-1:0] m_data{d};",
              f"  wire [{UW - 1}:0] m_user{d};", f"  wire [{PW - 1}:0] m_dest{d}, m_id{d};",
              f"  reg [15:0] lfsr{d}, ocnt{d};", f"  reg ook{d}, ohdr{d};",
              f"  reg [63:0] odig{d};", f"  reg [{UW - 1}:0] ouser{d}, ev_user{d};",
              f"  reg [{PW - 1}:0] odest{d}, oid{d};", f"  reg [31:0] out_flits{d};",
              f"  wire m_ready{d} = (stall_threshold == 16'd0) | (lfsr{d} >= stall_threshold);",
              f"  wire ofire{d} = m_valid{d} & m_ready{d};",
              f"  wire first{d} = ocnt{d} == 16'd0;",
              f"  wire [{UW - 1}:0] user{d} = first{d} ? m_user{d} : ouser{d};",
              f"  wire [{PW - 1}:0] dest{d} = first{d} ? m_dest{d} : odest{d};",
              f"  wire [{PW - 1}:0] id{d} = first{d} ? m_id{d} : oid{d};",
              f"  wire [{PID_BITS - 1}:0] pid{d} = {_pid_expr(f'user{d}')};",
              f"  wire pay_ok{d} = (first{d} | ook{d}) & (m_data{d} == {{{words}}});",
              f"  wire hdr_ok{d} = (first{d} | ohdr{d}) & (m_user{d} == user{d}) & "
              f"(m_dest{d} == dest{d}) & (m_id{d} == id{d});",
              f"  wire [63:0] dig{d} = fold(first{d} ? 64'h{FNV_INIT:016X} : odig{d}, "
              f"m_data{d});",
              f"  reg told{d};",
              "  always @* case (id" + str(d) + ")"]
        v += [f"    {PW}'d{k}: told{d} = tq{k}_{d}[tr{k}_{d}];" for k in range(N)]
        v += ["    default: told" + str(d) + " = 1'b1;", "  endcase",
              f"  wire result{d} = user{d}[{kind_hi}:{kind_lo}] == {kind_w}'d{RESULT};",
              f"  assign out_end_now[{d}] = ofire{d} & m_last{d} & (result{d} | told{d});",
              f"  assign ev_user[{UW * d + UW - 1}:{UW * d}] = ev_user{d};",
              f"  assign egress_flits[{32 * d + 31}:{32 * d}] = out_flits{d};",
              "  always @(posedge clk) begin",
              f"    if (rst) begin lfsr{d} <= (16'h{(0xACE1 + 0x1F35 * d) & 0xFFFF:04X} "
              f"^ seed[15:0]) "
              f"| 16'd1; ocnt{d} <= 16'd0; ook{d} <= 1'b0; ohdr{d} <= 1'b0; "
              f"out_flits{d} <= 32'd0; ev_user{d} <= {UW}'d0; "
              + "".join(f"tr{k}_{d} <= 0; " for k in range(N)) + "end",
              "    else begin",
              f"      lfsr{d} <= {{lfsr{d}[14:0], lfsr{d}[15] ^ lfsr{d}[13] ^ lfsr{d}[12] ^ "
              f"lfsr{d}[10]}};",
              f"      if (ofire{d}) begin",
              f"        out_flits{d} <= out_flits{d} + 32'd1;",
              f"        if (m_last{d}) begin",
              f"          ocnt{d} <= 16'd0;",
              f"          if (result{d} | told{d}) ev_user{d} <= user{d};",
              f"          if (!result{d}) case (id{d})"]
        v += [f"            {PW}'d{k}: tr{k}_{d} <= tr{k}_{d} + 1'b1;" for k in range(N)]
        v += ["            default: ;", "          endcase",
              f'          if (fd != 0) $fwrite(fd, "o %0d {d} %h %0d %0d %0d %0d %0d %h\\n", '
              f"cycle, user{d}, id{d}, dest{d}, {{16'd0, ocnt{d}}} + 32'd1, pay_ok{d}, "
              f"hdr_ok{d}, dig{d});",
              "        end else begin",
              f"          ocnt{d} <= ocnt{d} + 16'd1; ook{d} <= pay_ok{d}; ohdr{d} <= hdr_ok{d}; "
              f"odig{d} <= dig{d};",
              f"          ouser{d} <= user{d}; odest{d} <= dest{d}; oid{d} <= id{d};",
              "        end", "      end", "    end", "  end"]
    v += ["  // what Python reads when it wakes: the packets that ended in the last cycle",
          "  always @(posedge clk) begin",
          f"    if (rst) begin cycle <= 32'd0; ev_cycle <= 32'd0; in_end <= {N}'d0; "
          f"out_end <= {N}'d0; attn <= 1'b0; end",
          "    else if (run) begin",
          "      cycle <= cycle + 32'd1;",
          "      ev_cycle <= cycle;",
          "      in_end <= in_end_now;",
          "      out_end <= out_end_now;",
          "      attn <= (|in_idle_now) | (|out_end_now) | (cycle == wake_at);",
          "    end",
          "    if (flush && fd != 0) $fflush(fd);",
          "  end",
          f"  {switch} switch (", ",\n".join(f"    {c}" for c in conn), "  );",
          "endmodule", ""]
    return "\n".join(v), module

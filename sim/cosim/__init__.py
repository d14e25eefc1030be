"""Co-simulation: everything that runs the exported RTL under cocotb. Stimulus and the
packet-id codec (``stimulus``), pins (``pins``), the per-cycle driver, monitor and scoreboard
(``driver``), the Verilog packet player (``player``, ``player_verilog``), builds and their
cache (``build``), the cocotb runner (``runner``), replays (``replay``), AXI4-Stream helpers
(``axis``) and the cocotb test-bench modules (``tb_*``). The only package that imports cocotb."""

"""Progress on long steps: what the command line says while it exports, and how a running RTL
replay reports its position, its ETA and a coarser flit scale when it would take long."""

import json
import logging
import time

from sim.cli.main import main
from sim.cosim import replay as rtl_replay


def test_export_says_what_it_does_unless_quiet(tmp_path, capsys):
    """Progress goes to stderr, with --json too (stdout is the JSON alone); --quiet hides it."""
    for name, extra in (("a.v", []), ("b.v", ["--json"])):
        assert main(["export", "arbiter", "--ports", "2", "-o", str(tmp_path / name),
                     *extra]) == 0
        out, err = capsys.readouterr()
        err = err.splitlines()
        assert err[0].startswith("... exporting the arbiter to Verilog")
        assert err[1].startswith("... exported innet_arbiter_rr_p2_l1 in ")
    assert json.loads(out)["module"] == "innet_arbiter_rr_p2_l1"
    assert main(["export", "arbiter", "--ports", "2", "-o", str(tmp_path / "c.v"),
                 "--json", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out)["module"] == "innet_arbiter_rr_p2_l1"


def test_export_checks_its_paths_before_converting(tmp_path, capsys, monkeypatch):
    """A bad output path is refused before the (long) conversion starts."""
    import hw.export

    def never(*args, **kwargs):
        raise AssertionError("exported although the output path is bad")

    monkeypatch.setattr(hw.export, "export_arbiter", never)
    assert main(["export", "arbiter", "--ports", "2", "-o",
                 str(tmp_path / "missing" / "a.v")]) == 2
    assert "does not exist" in capsys.readouterr().err


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_replay_position_is_reported_with_an_eta_and_a_flit_scale(tmp_path, monkeypatch):
    monkeypatch.setattr(rtl_replay, "REPORT_EVERY_S", 0.02)
    path = tmp_path / "position.txt"
    write = rtl_replay.position_writer(str(path))
    caught = _Records()
    logger = logging.getLogger("innet.cosim")
    logger.addHandler(caught)
    monkeypatch.setattr(logger, "level", logging.INFO)
    watcher = rtl_replay._PositionWatcher(path, expected_cycles=10_000, flit_scale=4)
    now = time.time()
    path.write_text(f"1000 10 500 {now - 100}\n")   # 1,000 cycles 100 s ago ...
    time.sleep(0.2)
    path.write_text(f"2000 20 500 {now}\n")         # ... and 1,000 more since: 10 cycles/s
    time.sleep(0.2)
    watcher.stop()
    logger.removeHandler(caught)
    write(3000, 30, 500)
    assert path.read_text().split()[:3] == ["3000", "30", "500"]
    lines = [r.getMessage() for r in caught.records]
    assert any("cycle 2,000 of 10,000 (20 %), 20 of 500 packets started, 10 cycles/s, about "
               "800 s to go" in line for line in lines), lines
    # 10,000 cycles at 10 cycles/s: 1,000 s; a minute needs 17 times fewer cycles.
    warnings = [r.getMessage() for r in caught.records if r.levelno == logging.WARNING]
    assert warnings == ["this RTL replay takes about 1000 s at this rate; --flit-scale 68 "
                        "would take about a minute"]


def test_no_position_file_without_a_path():
    assert rtl_replay.position_writer(None) is None

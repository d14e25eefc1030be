"""No lost work (``innet run``, ``innet sweep``, every command): output paths checked before
the first point, each point kept as it finishes, Ctrl-C and crashes resumable, run names that
never overwrite nor escape the results folder, quiet ends on Ctrl-C and closed pipes.

Most cases replace ``run_point`` by a lookup of points computed once for real (the fuzzing
stays fast; the journal's JSON round trip is still what a resumed run reads), and the plots by
none; one case runs everything for real."""

import copy
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli.main import main
from sim.experiment import point as point_module
from sim.experiment import report
from sim.experiment import run as run_module
from sim.experiment.config import load_config, points

from .conftest import TINY, once_per_session

ROOT = Path(__file__).resolve().parent.parent

N_POINTS = len(points(load_config(TINY)))


class _Points(dict):
    def __repr__(self):   # hypothesis prints the fixtures of a failing case
        return f"<{len(self)} points of TINY>"


@pytest.fixture(scope="module")
def real_points(tmp_path_factory):
    """Every point of TINY, run once for real (once per session: the xdist workers share it):
    (workload, bucket, algo, policy, traffic) -> result."""
    def make(_):
        config = load_config(TINY)
        return [[list(p), dataclasses.asdict(point_module.run_point(config, *p))]
                for p in points(config)]

    return _Points({tuple(p): point_module.PointResult(**r)
                    for p, r in once_per_session(tmp_path_factory, "tiny-points", make)})


@contextmanager
def fake_points(real, interrupt_after=None, error=KeyboardInterrupt):
    """``run_point`` answers from ``real``; with ``interrupt_after=k`` the (k+1)-th call raises
    ``error`` (Ctrl-C by default). No plots. Yields the list of points run."""
    calls = []

    def run_point(config, *p, **kwargs):
        if interrupt_after is not None and len(calls) == interrupt_after:
            raise error()
        calls.append(p)
        return copy.deepcopy(real[tuple(p)])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_module, "run_point", run_point)
        mp.setattr(report, "_plots", lambda results: [])
        yield calls


def rows(run_dir):
    """results.json's rows without the wall-clock timings (which differ run to run)."""
    payload = json.loads((Path(run_dir) / "results.json").read_text())
    config = {k: v for k, v in payload["config"].items() if k != "source"}
    return [{k: v for k, v in row.items() if not k.endswith("wall_s")}
            for row in payload["points"]], config


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*"))


def one_line(err):
    err = err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def reference(real_points, tmp_path_factory):
    """The rows of an uninterrupted run (in-memory points, never read back from disk)."""
    root = tmp_path_factory.mktemp("reference")
    (root / "tiny.toml").write_text(TINY)
    with fake_points(real_points):
        assert main(["run", str(root / "tiny.toml"), "-o", str(root), "--name", "ref",
                     "--quiet", "--json"]) == 0
    return rows(root / "ref")


# -- output paths and run names -------------------------------------------------------------

@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.one_of(st.none(), st.text(max_size=12),
                      st.sampled_from(["..", ".", "../escape", "/abs", "a/b", "a\\b", "ok",
                                       "-dash", " ", "é" * 200, ".hidden"])),
       output=st.sampled_from(["missing", "nested/missing", "dir", "file", "file/below"]))
def test_output_paths_checked_before_the_first_point(real_points, capsys, name, output):
    """Whatever the run name and output folder: either the run lands in exactly
    ``<output>/<name>`` inside the output folder, or one line, exit status 2, no point run
    and nothing written."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "tiny.toml").write_text(TINY)
        (tmp / "dir").mkdir()
        (tmp / "file").write_text("mine\n")
        before = files_under(tmp)
        args = ["run", str(tmp / "tiny.toml"), "-o", str(tmp / output), "--quiet"]
        if name is not None:
            args.append(f"--name={name}")   # one argument even if it starts with '-'
        with fake_points(real_points) as calls:
            status = main(args)
        out, err = capsys.readouterr()
        bad_name = name is not None and (
            name in ("", ".", "..") or any(c in name for c in "/\\\0")
            or len(name.encode("utf-8", "surrogatepass")) > 255)
        bad_output = output.startswith("file")
        if bad_name or bad_output:
            assert status == 2, (status, err)
            assert "innet: error:" in one_line(err) and not calls
            assert files_under(tmp) == before
            assert (tmp / "file").read_text() == "mine\n"
            return
        if status == 2:   # a name the file system refuses (e.g. unencodable): said in a line
            assert "not a file name" in one_line(err) and not calls
            return
        assert status == 0, err
        runs = [p for p in (tmp / output).iterdir()]
        assert len(runs) == 1 and len(calls) == N_POINTS
        if name is not None:
            assert runs[0] == tmp / output / name
        assert runs[0].resolve().parent == (tmp / output).resolve()
        assert (runs[0] / "results.json").is_file()


def test_output_file_is_refused_before_any_point(tmp_path, capsys, monkeypatch):
    """The new user's case: ``-o afile`` used to run every point, then die in a traceback."""
    (tmp_path / "afile").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_module, "run_point",
                        lambda *a, **k: pytest.fail("a point ran before the path check"))
    assert main(["run", "--no-rtl", "-o", "afile"]) == 2
    assert one_line(capsys.readouterr().err) == (
        "innet: error: -o afile: not a directory (-o names the folder runs are written in)")
    assert files_under(tmp_path) == ["afile"]


def test_existing_name_is_refused_never_overwritten(real_points, tmp_path, capsys):
    (tmp_path / "tiny.toml").write_text(TINY)
    args = ["run", str(tmp_path / "tiny.toml"), "-o", str(tmp_path / "out"), "--name", "same",
            "--quiet"]
    with fake_points(real_points):
        assert main(args) == 0
        first = (tmp_path / "out" / "same" / "results.json").read_bytes()
        capsys.readouterr()
        assert main(args) == 2
    err = one_line(capsys.readouterr().err)
    assert "out/same: exists; choose another --name" in err and "--resume" in err
    assert (tmp_path / "out" / "same" / "results.json").read_bytes() == first


def test_default_names_take_a_free_suffix(real_points, tmp_path, capsys, monkeypatch):
    """Two runs started within the same second get <name>-<time> and <name>-<time>-2."""
    from datetime import datetime

    import sim.cli.run as cli_run

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2030, 1, 2, 3, 4, 5)
    monkeypatch.setattr(cli_run, "datetime", Frozen)
    (tmp_path / "tiny.toml").write_text(TINY)
    with fake_points(real_points):
        for _ in range(2):
            assert main(["run", str(tmp_path / "tiny.toml"), "-o", str(tmp_path),
                         "--quiet"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "tiny-20300102-030405", "tiny-20300102-030405-2"]


def test_experiment_name_cannot_leave_the_results_folder(tmp_path, capsys):
    (tmp_path / "evil.toml").write_text('[experiment]\nname = "../../evil"\nrtl = false\n')
    assert main(["run", str(tmp_path / "evil.toml"), "-o", str(tmp_path / "out")]) == 2
    assert "[experiment] name '../../evil'" in one_line(capsys.readouterr().err)
    assert files_under(tmp_path) == ["evil.toml"]


# -- interrupts, crashes and resume ---------------------------------------------------------

@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stops=st.lists(st.integers(0, N_POINTS), min_size=1, max_size=3),
       jobs_flag=st.booleans())
def test_interrupt_anywhere_then_resume_gives_the_same_rows(real_points, reference, capsys,
                                                            stops, jobs_flag):
    """Ctrl-C after k points (k random, possibly again while resuming): one line, exit 130,
    the k points kept; resuming runs only the missing points and writes the rows an
    uninterrupted run writes."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "tiny.toml").write_text(TINY)
        run_dir = tmp / "out" / "r"
        args = ["run", str(tmp / "tiny.toml"), "-o", str(tmp / "out"), "--name", "r",
                "--quiet"]
        done = 0
        for k in stops:
            with fake_points(real_points, interrupt_after=k) as calls:
                status = main(args)
            err = one_line(capsys.readouterr().err)
            run_now = min(k, N_POINTS - done)
            assert calls == points(load_config(TINY))[done:done + run_now]   # only missing ones
            done += run_now
            if done == N_POINTS:   # the interrupt never came: the run finished
                assert status == 0
                break
            assert status == 130
            if done == 0:
                assert err == "innet: interrupted: no point had finished; nothing kept"
                assert not (tmp / "out").exists()
                continue
            assert err == (f"innet: interrupted: {done} of {N_POINTS} points kept in "
                           f"{run_dir}; resume with: innet run --resume {run_dir}")
            assert len(list((run_dir / "points").glob("*.json"))) == done
            assert not (run_dir / "results.json").exists()
            args = ["run", "--resume", str(run_dir), "--quiet"] + (
                ["--jobs", "1"] if jobs_flag else [])
        if done < N_POINTS:
            with fake_points(real_points) as calls:
                assert main(args) == 0
            assert len(calls) == N_POINTS - done   # only the missing points
            capsys.readouterr()
        assert rows(run_dir) == reference


def test_crash_keeps_the_finished_points(real_points, reference, tmp_path, capsys):
    """A bug in a point (any exception) still leaves the finished points and a resume line;
    the traceback is the bug's."""
    (tmp_path / "tiny.toml").write_text(TINY)
    run_dir = tmp_path / "r"
    with fake_points(real_points, interrupt_after=3, error=RuntimeError):
        with pytest.raises(RuntimeError):
            main(["run", str(tmp_path / "tiny.toml"), "-o", str(tmp_path), "--name", "r",
                  "--quiet"])
    assert one_line(capsys.readouterr().err) == (
        f"innet: 3 of {N_POINTS} points kept in {run_dir}; resume with: innet run --resume "
        f"{run_dir}")
    with fake_points(real_points) as calls:
        assert main(["run", "--resume", str(run_dir), "--quiet"]) == 0
    assert len(calls) == 1 and rows(run_dir) == reference


@pytest.mark.parametrize("setup, extra, message", [
    ("none", [], "no such run directory"),
    ("plain", [], "not a run directory (no run.json"),
    ("corrupt", [], "run.json: not a run file innet wrote"),
    ("complete", [], "the run is complete (results.json); nothing to resume"),
    ("partial", ["--name", "x"], "drop --name"),
    ("partial", ["-o", "elsewhere"], "drop -o"),
    ("partial", ["--no-rtl"], "drop --no-rtl"),
    ("partial", ["CONFIG"], "drop CONFIG"),
])
def test_resume_refuses_what_it_cannot_do(real_points, tmp_path, capsys, setup, extra,
                                          message):
    (tmp_path / "tiny.toml").write_text(TINY)
    run_dir = tmp_path / "r"
    if setup == "plain":
        run_dir.mkdir()
    elif setup in ("corrupt", "complete", "partial"):
        with fake_points(real_points, interrupt_after=None if setup == "complete" else 2):
            main(["run", str(tmp_path / "tiny.toml"), "-o", str(tmp_path), "--name", "r",
                  "--quiet"])
        if setup == "corrupt":
            (run_dir / "run.json").write_text("{not json")
    capsys.readouterr()
    before = files_under(tmp_path)
    extra = [str(tmp_path / "tiny.toml") if a == "CONFIG" else a for a in extra]
    with fake_points(real_points) as calls:
        assert main(["run", "--resume", str(run_dir)] + extra) == 2
    assert message in one_line(capsys.readouterr().err) and not calls
    assert files_under(tmp_path) == before


def test_resume_for_real_writes_the_full_report(reference, tmp_path, capsys, monkeypatch):
    """No fakes: interrupt the real run after two points, resume, and get every file and the
    rows of an uninterrupted run (``reference``: every point run for real once per session)."""
    (tmp_path / "tiny.toml").write_text(TINY)
    real_run_point = run_module.run_point
    count = []

    def interrupting(*args, **kwargs):
        if len(count) == 2:
            raise KeyboardInterrupt
        count.append(1)
        return real_run_point(*args, **kwargs)
    monkeypatch.setattr(run_module, "run_point", interrupting)
    base = ["-o", str(tmp_path), "--quiet", "--json"]
    assert main(["run", str(tmp_path / "tiny.toml"), "--name", "cut"] + base) == 130
    monkeypatch.setattr(run_module, "run_point", real_run_point)
    capsys.readouterr()
    assert main(["run", "--resume", str(tmp_path / "cut"), "--quiet", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["output_dir"] == str(tmp_path / "cut") and len(payload["points"]) == 4
    for name in ("results.json", "results.csv", "report.md", "slowdown.png", "timeline.png"):
        assert (tmp_path / "cut" / name).stat().st_size > 0, name
    assert rows(tmp_path / "cut") == reference


# -- every command: Ctrl-C and closed pipes -------------------------------------------------

def test_interrupt_in_any_command_is_one_line(capsys, monkeypatch):
    import sim.cli.cache as cli_cache

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_cache, "_cmd_cache", interrupted)
    assert main(["cache"]) == 130
    assert one_line(capsys.readouterr().err) == "innet: interrupted"


def test_broken_pipe_elsewhere_is_still_a_bug(capsys, monkeypatch):
    """Only a closed stdout ends quietly; a BrokenPipeError from anything else propagates."""
    import sim.cli.cache as cli_cache

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(cli_cache, "_cmd_cache", broken)
    with pytest.raises(BrokenPipeError):
        main(["cache"])


def _innet(*args, **kwargs):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "sim.cli", *args], cwd=kwargs.pop("cwd"),
                            env=env, text=True, **kwargs)


def test_closed_stdout_ends_quietly(tmp_path):
    """``innet ... | head``: the reader left before innet wrote; exit 141 and nothing on
    stderr."""
    proc = _innet("export", "layout", "--lanes", "8", "--json", cwd=tmp_path,
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()   # the reader is gone before the first write
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and err == "", err


def _stderr_after_exit(proc):
    """The stderr of an interrupted innet once it has exited (its process group is killed if
    it has not within a minute, so a hung run cannot outlive the test)."""
    try:
        return proc.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def _wait_for_a_point(proc, kept):
    """Until the run ``proc`` has kept a finished point in ``kept`` (not a temporary file)."""
    deadline = time.monotonic() + 120
    while not (kept.is_dir() and any(kept.glob("[0-9]*.json"))):
        assert proc.poll() is None and time.monotonic() < deadline, "no point finished"
        time.sleep(0.05)


@pytest.mark.parametrize("command", [["run"], ["sweep", "--jobs", "2"]])
def test_ctrl_c_at_the_terminal(tmp_path, command):
    """SIGINT to the whole process group (what Ctrl-C does, pool workers included): one line,
    exit status 130, the finished points kept, no traceback from any process."""
    config = tmp_path / "big.toml"
    config.write_text('[experiment]\nname = "big"\nbucket_mb = [5, 25, 100]\n'
                      'policies = ["rr", "prio", "wrr"]\nrtl = false\n')
    proc = _innet(*command, str(config), "--name", "c", "--quiet", cwd=tmp_path,
                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_for_a_point(proc, tmp_path / "results" / "c" / "points")
    os.killpg(proc.pid, signal.SIGINT)
    err = _stderr_after_exit(proc)
    assert proc.returncode == 130
    line = one_line(err)
    assert line.startswith("innet: interrupted: ") and "points kept in results/c" in line
    assert line.endswith(f"resume with: innet {command[0]} --resume results/c")


def test_sigterm_is_handled_as_ctrl_c(tmp_path):
    """``kill`` (SIGTERM) to innet alone, not to its process group: the finished points are
    kept and the line says how to resume, exit status 143 (128 + SIGTERM), no traceback; and
    the children it waits for (the pool's workers, a simulator) do not outlive it."""
    config = tmp_path / "big.toml"
    config.write_text('[experiment]\nname = "big"\nbucket_mb = [5, 25, 100]\n'
                      'policies = ["rr", "prio", "wrr"]\nrtl = false\n')
    proc = _innet("sweep", "--jobs", "2", str(config), "--name", "t", "--quiet", cwd=tmp_path,
                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    _wait_for_a_point(proc, tmp_path / "results" / "t" / "points")
    proc.terminate()
    err = _stderr_after_exit(proc)
    assert proc.returncode == 143
    line = one_line(err)
    assert line.startswith("innet: terminated: ") and "points kept in results/t" in line
    deadline = time.monotonic() + 30   # the pool's workers go with it
    while subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "a child of innet outlived it"
        time.sleep(0.2)

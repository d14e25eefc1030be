"""``innet model`` and ``innet trace`` from the command line."""

import json
import subprocess
import sys

import pytest

from sim.cli.model import parse_size
from sim.cli.output import UsageError


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "sim.cli", *args], capture_output=True,
                          text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_parse_size():
    assert parse_size("1GiB") == 1 << 30
    assert parse_size("25MB") == 25 * 10**6
    assert parse_size("4096") == 4096
    assert parse_size("1e3MiB") == 1000 << 20
    assert parse_size("2.5E-1KiB") == 256                   # exactly 256 bytes
    for text, reason in (("2.5e-3KiB", "not a whole number"), ("1e35TiB", "more than"),
                         ("1e999999999", "more than"), ("1e-999999999GiB", "not a whole")):
        with pytest.raises(UsageError, match=reason):
            parse_size(text)
    with pytest.raises(UsageError):
        parse_size("12XB")


def test_collective_json():
    status, out, err = run("model", "collective", "--gpu", "h100", "--gpus", "8", "--algo",
                           "ring", "--size", "1GiB", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["busbw_GBps"] == pytest.approx(data["algbw_GBps"] * 2 * 7 / 8)
    assert data["sms"] == 32 and data["hbm_bytes_per_gpu"] > data["link_bytes_per_gpu"]


def test_overlap_json():
    status, out, err = run("model", "overlap", "--gpu", "a100", "--compute",
                           "gemm:4096,4096,4096", "--comm", "allreduce:64MiB", "--algo",
                           "inswitch", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["compute_overlapped_s"] >= data["compute_alone_s"]
    assert sum(data["compute_attribution"].values()) == pytest.approx(data["compute_slowdown"])


def test_iteration_json():
    status, out, err = run("model", "iteration", "--model", "resnet50", "--gpu", "a100",
                           "--gpus", "8", "--algo", "ring", "--batch", "32", "--json")
    assert status == 0, err
    data = json.loads(out)
    for key in ("forward_s", "backward_alone_s", "backward_s", "exposed_comm_s",
                "iteration_s", "backprop_slowdown", "slowdown_attribution"):
        assert key in data


def test_trace_gen_info_validate(tmp_path):
    out = tmp_path / "r.txt"
    status, _, err = run("trace", "gen", "--model", "resnet50", "--batch", "8", "--gpu", "a100",
                         "--gpus", "4", "--algo", "inswitch", "--bucket-mb", "25", "-o", str(out))
    assert status == 0, err
    status, info, _ = run("trace", "info", str(out), "--json")
    assert status == 0 and json.loads(info)["metadata"]["algo"] == "inswitch"
    status, text, _ = run("trace", "validate", str(out))
    assert status == 0 and "valid" in text


@pytest.mark.parametrize("args, message", [
    (["model", "collective", "--gpu", "b200"], "unknown GPU 'b200'"),
    (["model", "collective", "--algo", "mesh"], "--algo must be one of"),
    (["model", "collective", "--gpus", "1"], "--gpus must be at least 2"),
    (["model", "overlap", "--compute", "gemm:1,2"], "expected gemm:M,N,K"),
    (["model", "overlap", "--comm", "alltoall:1MiB"], "expected OP:SIZE with OP one of"),
    (["model", "iteration", "--model", "alexnet"], "unknown model 'alexnet'"),
    (["model", "iteration", "--straggler", "9:0.5"], "--straggler '9:0.5'"),
    # the holes of "Contention and iterations that predict measurements", item 4
    (["model", "iteration", "--bucket-mb", "1e-9"], "--bucket-mb 1e-09 is less than one byte"),
    (["model", "iteration", "--channels", "1000"], "channels must be an integer in [1, 108]"),
    (["model", "iteration", "--straggler", "3:nan"],
     "--straggler '3:nan': the factor must be a finite number in [0.001, 1000]"),
    (["model", "collective", "--size", "0.1"], "--size '0.1' is 0.1 bytes, not a whole number"),
    (["model", "collective", "--gpus", "100000"], "--gpus must be at most 64"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    status, out, err = run(*args)
    assert status == 2
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_trace_reports_location(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text('innet-trace 1 {"gpus": 2}\nkernel gpu=5 id=0 start_ns=0 dur_ns=1 '
                   'phase=fwd\n')
    status, _, err = run("trace", "validate", str(bad))
    assert status == 2 and f"{bad}:2: gpu: 5 is out of range" in err
    assert len(err.strip().splitlines()) == 1


def test_trace_gen_bad_path_leaves_nothing(tmp_path):
    blocker = tmp_path / "f"
    blocker.write_text("")
    status, _, err = run("trace", "gen", "--gpus", "2", "-o", str(blocker / "x.itr"))
    assert status == 2 and "does not exist" in err

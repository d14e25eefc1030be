"""Bad numbers given to ``innet model ...`` and ``innet trace gen``, as a new user would try them:
each is refused with one line ``innet: error: ...`` and exit status 2, no traceback, and no file
written; the models refuse the same values with :class:`ModelInputError`. And ``innet trace
gen`` honours every option it accepts and records the configuration in the trace's metadata.
"""

import json
import math
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli.main import main
from sim.errors import InputError
from sim.gpu.collectives import collective_cost
from sim.gpu.iteration import IterationConfig, simulate_iteration
from sim.gpu.presets import MAX_GPUS, ModelInputError, gpu_preset
from sim.gpu.workloads import build_workload, resnet50
from sim.trace.format import read_trace
from sim.trace.generate import generate_trace

A100 = gpu_preset("a100")
#: a small, quick iteration for trace gen (ResNet-50 at micro-batch 8 on 4 GPUs)
SMALL = ["--model", "resnet50", "--batch", "8", "--gpus", "4", "--chunk-kb", "1024"]


def innet(argv, capsys):
    """``innet argv`` in this process: (status, stdout, stderr). An exception escaping
    ``main`` (a traceback for the user) fails the test here."""
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def assert_refused(status, err, message):
    assert status == 2, err
    assert err.startswith("innet: error: "), err
    assert message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


# -- the holes of the issue, and the others found the same way -------------------------------

HOLES = [
    # DDP bucket sizes that come to 0 bytes (a ValueError traceback before)
    (["model", "iteration", "--bucket-mb", "1e-9"],
     "--bucket-mb 1e-09 is less than one byte (1 byte = 9.54e-07 MiB)"),
    (["model", "iteration", "--first-bucket-mb", "1e-9"],
     "--first-bucket-mb 1e-09 is less than one byte (1 byte = 9.54e-07 MiB)"),
    # ... and so large they overflow to infinity (an OverflowError traceback)
    (["model", "iteration", "--bucket-mb", "1e307"],
     "--bucket-mb must be at most 1.07374e+09 MiB (2^50 bytes), not 1e+307"),
    # more channels than the GPU has SMs (a ZeroDivisionError traceback)
    (["model", "iteration", "--channels", "1000"],
     ("channels must be an integer in [1, 108] (a channel is one CTA on an SM of its own; "
      "A100 SXM4 40GB has 108 SMs), not 1000")),
    (["model", "collective", "--channels", "109"], "channels must be an integer in [1, 108]"),
    (["model", "collective", "--channels", "1" + "0" * 30],
     ("channels must be an integer in [1, 108] (a channel is one CTA on an SM of its own; "
      "A100 SXM4 40GB has 108 SMs), not 1.00e+30")),
    # straggler factors that are not a sane speed (a deadlock, or nonsense results)
    (["model", "iteration", "--straggler", "3:nan"],
     ("--straggler '3:nan': the factor must be a finite number in [0.001, 1000] (a GPU at most "
      "1000 times slower or faster than nominal), not nan")),
    (["model", "iteration", "--straggler", "3:inf"],
     "--straggler '3:inf': the factor must be a finite number in [0.001, 1000]"),
    (["model", "iteration", "--straggler", "3:1e-300"],
     "--straggler '3:1e-300': the factor must be a finite number in [0.001, 1000]"),
    (["model", "iteration", "--straggler", "3:-0"],
     "--straggler '3:-0': the factor must be a finite number in [0.001, 1000]"),
    (["model", "iteration", "--straggler", "3:1e300"],
     "--straggler '3:1e300': the factor must be a finite number in [0.001, 1000]"),
    (["model", "iteration", "--straggler", "\u0663:0.5"],
     "--straggler '\u0663:0.5': expected GPU:FACTOR"),
    (["model", "iteration", "--straggler", "3:0.5", "--straggler", "3:0.7"],
     "--straggler '3:0.7': GPU 3 has a factor already (0.5)"),
    (["model", "iteration", "--straggler", "8:0.5"], "--straggler '8:0.5': GPU must be in [0, 7]"),
    # sizes that are not a positive whole number of bytes, or beyond what the model takes
    (["model", "collective", "--size", "0.1"],
     "--size '0.1' is 0.1 bytes, not a whole number of bytes"),
    (["model", "collective", "--size", "0.7MiB"],
     "--size '0.7MiB' is 734003.2 bytes, not a whole number of bytes"),
    (["model", "collective", "--size", "1" + "0" * 35 + "TiB"],
     "is more than 1125899906842624 bytes (2^50, 1024 TiB), the largest size the model takes"),
    (["model", "collective", "--size", "41GiB"],
     ("size_bytes must be a finite number in [0, 42949672960] (the buffer lives in the HBM of "
      "one A100 SXM4 40GB), not 44023414784")),
    (["model", "overlap", "--comm", "allreduce:0.5"],
     "--comm 'allreduce:0.5': size '0.5' is 0.5 bytes, not a whole number of bytes"),
    (["model", "overlap", "--compute", "stream:0.5"],
     "--compute 'stream:0.5': size '0.5' is 0.5 bytes, not a whole number of bytes"),
    # more GPUs than one switch holds
    (["model", "collective", "--gpus", "100000"],
     (f"--gpus must be at most {MAX_GPUS} (one switch of 64 ports as an NVSwitch gen3, each GPU "
      f"on a port of its own), not 100000")),
    (["model", "overlap", "--gpus", "65"], "--gpus must be at most 64"),
    (["model", "iteration", "--gpus", "100000"],
     ("--gpus must be at most 64 (one switch of 64 ports as an NVSwitch gen3, each GPU on a "
      "port of its own), not 100000")),
    (["model", "iteration", "--gpus", "1" + "0" * 12, "--straggler", "1:0.5"],
     "--gpus must be at most 64 (one switch of 64 ports as an NVSwitch gen3, each GPU on a "),
    # GEMM dimensions: another script's digits, or matrices larger than the GPU's memory
    (["model", "overlap", "--compute", "gemm:1_0,\u0663,3"],
     "--compute 'gemm:1_0,\u0663,3': expected gemm:M,N,K"),
    (["model", "overlap", "--compute", "gemm:" + "1" * 80 + ",1,1"],
     ("the three matrices take 4.44e+79 bytes (2 an element), more than the HBM of one A100 "
      "SXM4 40GB, 42949672960 bytes")),
    # workload sizes: too large to compute, or to fit in the GPU's memory
    (["model", "iteration", "--batch", "1" + "0" * 300],
     "batch must be an integer in [1, 16777216] (samples per GPU), not 1.00e+300"),
    (["model", "iteration", "--batch", "100000"],
     ("layer conv1 of resnet50 outputs 160563200000 bytes of activations, more than the HBM of "
      "one A100 SXM4 40GB, 42949672960 bytes")),
    (["model", "iteration", "--model", "transformer", "--hidden", "100000"],
     ("transformer's gradients, 11532538400000 bytes, do not fit in the HBM of one A100 SXM4 "
      "40GB, 42949672960 bytes")),
    (["model", "iteration", "--model", "transformer", "--layers", "100000000"],
     "layers must be an integer in [1, 10000]"),
    (["model", "iteration", "--model", "bert_large", "--seq", "1024"],
     "seq must be an integer in [1, 512] (bert_large has 512 position embeddings), not 1024"),
    (["model", "iteration", "--grad-accum", "100000"],
     ("the iteration has 31600001 compute kernels to simulate (158 layers x 2 x 100000 "
      "micro-batches + the optimizer, x 1 speed factors); at most 1000000")),
    # an option the configuration would ignore
    (["model", "iteration", "--bucketing", "horovod", "--bucket-mb", "10"],
     "--bucket-mb applies to --bucketing ddp only"),
]


@pytest.mark.parametrize("argv, message", HOLES, ids=[" ".join(a) for a, _ in HOLES])
def test_bad_model_input_is_one_line(argv, message, capsys):
    status, out, err = innet(argv, capsys)
    assert_refused(status, err, message)
    assert out == ""


TRACE_HOLES = [
    (["--bucket-mb", "1e-9"], "--bucket-mb 1e-09 is less than one byte"),
    (["--first-bucket-mb", "1e-9"], "--first-bucket-mb 1e-09 is less than one byte"),
    (["--channels", "1000"], "channels must be an integer in [1, 108]"),
    (["--straggler", "3:nan"],
     "--straggler '3:nan': the factor must be a finite number in [0.001, 1000]"),
    (["--straggler", "3:inf"], "--straggler '3:inf': the factor must be a finite number"),
    (["--straggler", "3:1e-300"], "--straggler '3:1e-300': the factor must be a finite number"),
    (["--gpus", "100000", "--algo", "ring"], "--gpus must be at most 64"),
    (["--chunk-kb", "1e-9"], "--chunk-kb 1e-09 is less than one byte"),
    (["--chunk-kb", "1e306"], "--chunk-kb must be at most 1.09951e+12 KiB (2^50 bytes)"),
    # a piece larger than a record's 32-bit bytes field (a 6.4 GB tensor, sent whole)
    (["--chunk-kb", "5000000", "--model", "transformer", "--hidden", "20000", "--layers", "1",
      "--gpu", "h100", "--gpus", "2", "--algo", "inswitch"],
     ("a message piece of 5120000000 bytes does not fit in a trace record's bytes field (at "
      "most 4294967295): use smaller pieces")),
    (["--chunk-kb", "0.001"], "the trace would hold 1431196408 records, more than 10000000"),
    (["--p2p-mb", "1e-9"], "--p2p-mb 1e-09 is less than one byte"),
    (["--p2p-mb", "1e306"], "--p2p-mb must be at most 1.07374e+09 MiB (2^50 bytes)"),
    (["--bucketing", "horovod", "--first-bucket-mb", "2"],
     "--first-bucket-mb applies to --bucketing ddp only"),
    # a kernel longer than a record's 32-bit duration (silently cut to 4.29 s before); which
    # kernel is first and how long it lasts follow the GPU model's calibration, not the check
    (["--model", "vgg16", "--gpus", "2", "--straggler", "1:0.001"],
     "s, longer than a trace record holds (4294967295 ns, 4.29 s)"),
]


@pytest.mark.parametrize("options, message", TRACE_HOLES,
                         ids=[" ".join(o) for o, _ in TRACE_HOLES])
def test_bad_trace_gen_input_is_one_line_and_writes_nothing(options, message, tmp_path,
                                                           capsys):
    out = tmp_path / "t.itr"
    status, _, err = innet(["trace", "gen", *options, "-o", str(out)], capsys)
    assert_refused(status, err, message)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [
    ["model", "iteration", "--straggler", "3:nan"],
    ["model", "collective", "--size", "0.1"],
    ["trace", "gen", "--bucket-mb", "1e-9", "-o", "{tmp}/t.itr"],
])
def test_a_real_process_prints_one_line(argv, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "sim.cli", *argv], check=False,
                          capture_output=True, text=True)
    assert_refused(proc.returncode, proc.stderr, "innet: error: ")
    assert list(tmp_path.iterdir()) == []


# -- the models refuse the same values ------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"n": 1}, "a collective needs at least 2 GPUs, not 1"),
    ({"n": 8.0}, "the GPU count must be an integer at least 2, not 8.0"),
    ({"size_bytes": math.nan}, "size_bytes must be a finite number"),
    ({"size_bytes": math.inf}, "size_bytes must be a finite number"),
    ({"size_bytes": -1}, "size must be non-negative, not -1"),
    ({"size_bytes": 10**40}, "size_bytes must be a finite number in [0, 42949672960]"),
    ({"channels": 0}, "channels must be an integer in [1, 108]"),
    ({"channels": 109}, "channels must be an integer in [1, 108]"),
    ({"op": "scatter"}, "unknown collective 'scatter'"),
])
def test_collective_cost_refuses(kwargs, message):
    args = {"gpu": A100, "n": 8, "size_bytes": 1 << 20, **kwargs}
    with pytest.raises(ModelInputError) as info:
        collective_cost(**args)
    assert message in str(info.value)
    assert isinstance(info.value, (InputError, ValueError))


@pytest.mark.parametrize("name, kwargs, message", [
    ("resnet50", {"batch": 0}, "batch must be an integer in [1, 16777216]"),
    ("resnet50", {"batch": True}, "batch must be an integer"),
    ("transformer", {"hidden": 2**30}, "hidden must be an integer in [1, 16777216]"),
    ("transformer", {"layers": 10_001}, "layers must be an integer in [1, 10000]"),
    ("gpt2_xl", {"seq": 1025}, "seq must be an integer in [1, 1024]"),
])
def test_build_workload_refuses(name, kwargs, message):
    with pytest.raises(ModelInputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build_workload(name, **kwargs)


def test_generate_trace_refuses_a_configuration_for_other_gpus():
    with pytest.raises(ModelInputError, match="the configuration is for 8 GPUs, the trace for 4"):
        generate_trace(resnet50(8), A100, 4, config=IterationConfig(n_gpus=8))


# -- no traceback whatever the number -------------------------------------------------------

NASTY = ["nan", "-nan", "inf", "-inf", "-0", "0", "-1", "1e-300", "1e300", "1e-9", "1.5",
         "0.5", "3", "64", "65", "108", "109", "512", "513", str(2**64), "1" + "0" * 40,
         "0x10", "1_0", "\u0663", "", " ", "1e5", "4294967296"]

#: (command, option, how the value is written into it)
NUMERIC = [
    (["model", "collective"], "--gpus", "{}"), (["model", "collective"], "--size", "{}"),
    (["model", "collective"], "--size", "{}KiB"), (["model", "collective"], "--channels", "{}"),
    (["model", "overlap"], "--gpus", "{}"), (["model", "overlap"], "--compute", "gemm:{},64,64"),
    (["model", "overlap"], "--compute", "stream:{}MiB"),
    (["model", "overlap"], "--comm", "allreduce:{}"),
    (["model", "iteration"], "--gpus", "{}"), (["model", "iteration"], "--batch", "{}"),
    (["model", "iteration"], "--bucket-mb", "{}"),
    (["model", "iteration"], "--first-bucket-mb", "{}"),
    (["model", "iteration"], "--grad-accum", "{}"), (["model", "iteration"], "--channels", "{}"),
    (["model", "iteration"], "--straggler", "1:{}"),
    (["model", "iteration"], "--straggler", "{}:0.5"),
    (["model", "iteration", "--model", "transformer", "--layers", "2"], "--hidden", "{}"),
    (["model", "iteration", "--model", "transformer", "--hidden", "64"], "--layers", "{}"),
    (["model", "iteration", "--model", "bert_large", "--batch", "1"], "--seq", "{}"),
]
TRACE_NUMERIC = ["--gpus", "--batch", "--bucket-mb", "--first-bucket-mb", "--grad-accum",
                 "--channels", "--straggler", "--chunk-kb", "--p2p-mb"]


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(NUMERIC), st.sampled_from(NASTY) | st.floats().map(repr)
       | st.integers(-(2**70), 2**70).map(str))
def test_model_numbers_never_raise(capsys, case, value):
    command, option, form = case
    status, _, err = innet([*command, option, form.format(value)], capsys)
    assert status in (0, 2), err
    if status == 2:
        assert len(err.strip().splitlines()) == 1 and "error:" in err, err


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TRACE_NUMERIC), st.sampled_from(NASTY) | st.floats().map(repr))
def test_trace_gen_numbers_never_raise(tmp_path_factory, capsys, monkeypatch, option, value):
    # Valid values may still ask for millions of records (--chunk-kb 0.1): refused sooner, so
    # that every case takes seconds at most.
    monkeypatch.setattr("sim.cli.model.MAX_TRACE_RECORDS", 100_000)
    folder = tmp_path_factory.mktemp("gen")
    text = f"1:{value}" if option == "--straggler" else value
    # --gpus last, so the nasty count replaces SMALL's
    argv = ["trace", "gen", *SMALL, option, text, "-o", str(folder / "t.itr")]
    status, _, err = innet(argv, capsys)
    assert status in (0, 2), err
    if status == 2:
        assert len(err.strip().splitlines()) == 1 and "error:" in err, err
        assert list(folder.iterdir()) == []


# -- innet trace gen honours every option --------------------------------------------------

def trace_of(tmp_path, capsys, *options):
    out = tmp_path / f"t{len(list(tmp_path.iterdir()))}.itr"
    status, _, err = innet(["trace", "gen", *SMALL, *options, "-o", str(out)], capsys)
    assert status == 0, err
    meta, records = read_trace(out)
    return meta, list(records)


@pytest.mark.parametrize("options, key, value", [
    (["--no-overlap"], "overlap", False),
    (["--straggler", "1:0.5"], "straggler_speed_factors", {"1": 0.5}),
    (["--grad-accum", "2"], "grad_accum_microbatches", 2),
    (["--precision", "fp32"], "precision", "fp32"),
    (["--channels", "8"], "channels_sms", 8),
    (["--bucketing", "horovod"], "bucketing", "horovod"),
    (["--first-bucket-mb", "16"], "first_bucket_bytes", 16 << 20),
    (["--bucket-mb", "5"], "bucket_cap_bytes", 5 << 20),
    (["--algo", "inswitch"], "algo", "inswitch"),
    (["--gpu", "h100"], "gpu", "H100 SXM5 80GB"),
    (["--p2p-mb", "1"], "p2p_bytes", 1 << 20),
    (["--chunk-kb", "512"], "chunk_bytes", 512 << 10),
])
def test_trace_gen_option_changes_the_trace(tmp_path, capsys, options, key, value):
    base_meta, base = trace_of(tmp_path, capsys)
    meta, records = trace_of(tmp_path, capsys, *options)
    assert meta[key] == value and base_meta[key] != value
    assert records != base, f"{options} left the trace as it was"


def test_trace_gen_metadata_records_the_whole_configuration(tmp_path, capsys):
    meta, _ = trace_of(tmp_path, capsys)
    assert meta["straggler_speed_factors"] == {} and meta["overlap"] is True
    assert meta["channels_sms"] is None and meta["collective_sms"] == A100.ring_channels
    assert {k: meta[k] for k in ("first_bucket_bytes", "bucket_cap_bytes", "fusion_bytes",
                                 "fusion_cycle_s", "grad_accum_microbatches", "bucketing",
                                 "optimizer_bytes_per_param")} == {
        "first_bucket_bytes": 1 << 20, "bucket_cap_bytes": 25 << 20, "fusion_bytes": 64 * 10**6,
        "fusion_cycle_s": 5e-3, "grad_accum_microbatches": 1, "bucketing": "ddp",
        # SGD-momentum (ResNet-50's recipe) with FP32 state: 5 x 4 bytes a parameter
        "optimizer_bytes_per_param": 20.0}
    meta, _ = trace_of(tmp_path, capsys, "--model", "transformer", "--batch", "2", "--hidden",
                       "256", "--layers", "2", "--seq", "128")
    assert (meta["hidden_features"], meta["layers"], meta["seq_tokens"]) == (256, 2, 128)


def test_trace_gen_uses_the_configuration_of_model_iteration(tmp_path, capsys):
    """The trace's iteration is the one ``innet model iteration`` reports for the same options."""
    options = ["--straggler", "2:0.7", "--grad-accum", "2", "--channels", "12", "--no-overlap"]
    meta, _ = trace_of(tmp_path, capsys, *options)
    status, out, err = innet(["model", "iteration", *SMALL[:-2], *options, "--json"], capsys)
    assert status == 0, err
    assert json.loads(out)["iteration_s"] == meta["iteration_s"]


def test_simulate_iteration_validates_against_the_gpu():
    with pytest.raises(ModelInputError, match=r"channels must be an integer in \[1, 108\]"):
        simulate_iteration(resnet50(8), A100, IterationConfig(n_gpus=2, channels=109))

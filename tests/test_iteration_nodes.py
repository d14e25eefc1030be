"""Iterations across nodes: the engine's all-reduces are the multi-node model's
(sim/gpu/multinode.py), and the command line's ``innet model iteration --nodes``."""

import json
import subprocess
import sys

import pytest

from sim.gpu.iteration import IterationConfig, simulate_iteration
from sim.gpu.multinode import multinode_cost
from sim.gpu.nodes import node_preset
from sim.gpu.presets import gpu_preset
from sim.gpu.workloads import bert_large, resnet50

A100 = gpu_preset("a100")


@pytest.mark.parametrize("algo", ["ring", "tree", "sharp"])
def test_two_node_allreduces_are_multinode_costs(algo):
    """Golden: each bucket's all-reduce, alone, takes multinode_cost's time for its bytes."""
    config = IterationConfig(n_gpus=8, nodes=2, algo=algo)
    result = simulate_iteration(resnet50(64), A100, config, record=False)
    node = node_preset("a100")
    expected = sum(multinode_cost(node, 2, 8, b, "allreduce", algo).time_s
                   for b in result.bucket_bytes)
    assert result.buckets == len(result.bucket_bytes) > 1
    assert result.n_gpus == 16
    assert result.allreduce_alone_s == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("workload", [resnet50(256), bert_large(32, 384)],
                         ids=["resnet50", "bert_large"])
def test_two_nodes_scale_worse_than_one(workload):
    """DDP on 2 × 8 A100 over HDR InfiniBand: the all-reduces take longer than on one node's
    NVLink, so the weak-scaling efficiency drops."""
    one = simulate_iteration(workload, A100, IterationConfig(n_gpus=1), record=False)
    node = simulate_iteration(workload, A100, IterationConfig(n_gpus=8), record=False)
    two = simulate_iteration(workload, A100, IterationConfig(n_gpus=8, nodes=2), record=False)
    assert two.allreduce_alone_s > node.allreduce_alone_s
    assert one.iteration_s / two.iteration_s < one.iteration_s / node.iteration_s < 1


def test_node_bounds_come_from_the_network():
    with pytest.raises(ValueError, match=r"nodes must be an integer in \[2, 100\]"):
        simulate_iteration(resnet50(8), A100, IterationConfig(n_gpus=8, nodes=101))
    with pytest.raises(ValueError, match=r"n_gpus must be an integer in \[1, 8\]"):
        simulate_iteration(resnet50(8), A100, IterationConfig(n_gpus=9, nodes=2))
    with pytest.raises(ValueError, match="algo across nodes must be one of ring, tree, sharp"):
        IterationConfig(n_gpus=8, nodes=2, algo="inswitch").validate()
    with pytest.raises(ValueError, match="channels applies to one node only"):
        IterationConfig(n_gpus=8, nodes=2, channels=4).validate()
    with pytest.raises(ValueError, match="no multi-node preset holds V100"):
        simulate_iteration(resnet50(8), gpu_preset("v100"), IterationConfig(nodes=2))
    with pytest.raises(ValueError, match="speed has 8 factors for 16 GPUs"):
        IterationConfig(n_gpus=8, nodes=2, speed=[1.0] * 8).validate()
    # 100 nodes of 8 GPUs: 800 ranks, past one switch's MAX_GPUS, which only bounds one node
    IterationConfig(n_gpus=8, nodes=100).validate()


def _run(*args):
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "model", "iteration", "--model",
                           "resnet50", "--batch", "32", *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_cli_iteration_across_nodes():
    status, out, err = _run("--nodes", "2", "--gpus", "8", "--algo", "sharp", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert (data["nodes"], data["gpus_per_node"], data["n_gpus"]) == (2, 8, 16)
    config = IterationConfig(n_gpus=8, nodes=2, algo="sharp")
    expected = simulate_iteration(resnet50(32), A100, config, record=False)
    assert data["allreduce_alone_s"] == pytest.approx(expected.allreduce_alone_s)


@pytest.mark.parametrize("args, message", [
    (("--nodes", "2", "--algo", "inswitch"), "--algo across nodes must be one of ring, tree"),
    (("--algo", "sharp"), "--algo sharp reduces in the InfiniBand switches"),
    (("--nodes", "2", "--gpus", "9"), "--gpus (per node) must be at most 8"),
    (("--nodes", "101"), "--nodes must be at most 100"),
    (("--nodes", "2", "--gpu", "v100"), "--gpu: no multi-node preset"),
    (("--nodes", "2", "--channels", "4"), "--channels applies to one node only"),
    (("--nodes", "2", "--straggler", "16:0.5"), r"GPU must be in [0, 15]"),
])
def test_cli_iteration_bad_combinations(args, message):
    status, out, err = _run(*args)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err

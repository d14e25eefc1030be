"""An experiment's configuration (``innet run``, ``innet sweep``): the embedded default, parsing
and validating a TOML file, and the points of its cross product."""

import itertools
import tomllib
from dataclasses import dataclass, fields, replace

from hw.spec import Policy
from sim.errors import ConfigError

__all__ = ["ExperimentConfig", "load_config", "DEFAULT_CONFIG", "points", "MiB"]


MiB = 1 << 20


#: The embedded default experiment (``innet run`` with no argument).
DEFAULT_CONFIG = """\
# innet run: the default experiment. Every key is optional; these are the defaults.
[experiment]
name = "default"
workloads = ["resnet50", "bert_large"]
gpu = "a100"
gpus = 8
algorithms = ["ring", "tree", "inswitch"]
bucket_mb = [25.0]
policies = ["rr", "prio"]
p2p_mb = 16.0          # activation gradients per GPU crossing a pipeline-stage boundary
rtl = true             # RTL switch in the loop for the first bucket window of each point
sim = "verilator"

[switch]
lanes = 2              # with the flit scale, lanes only set bytes per flit; 2 builds fast
slots = 16
chunk_flits = 4
mtu_flits = 64
target_flits = 4000    # simulated flits per GPU per iteration (sets the flit scale)
"""


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = "default"
    workloads: tuple = ("resnet50", "bert_large")
    gpu: str = "a100"
    gpus: int = 8
    algorithms: tuple = ("ring", "tree", "inswitch")
    bucket_mb: tuple = (25.0,)
    policies: tuple = ("rr", "prio")
    p2p_mb: float = 16.0
    rtl: bool = True
    sim: str = "verilator"
    lanes: int = 2
    slots: int = 16
    chunk_flits: int = 4
    mtu_flits: int = 64
    target_flits: int = 4000
    source: str = "<default>"

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}


_SECTIONS = {
    "experiment": {"name": str, "workloads": list, "gpu": str, "gpus": int,
                   "algorithms": list, "bucket_mb": list, "policies": list, "p2p_mb": float,
                   "rtl": bool, "sim": str},
    "switch": {"lanes": int, "slots": int, "chunk_flits": int, "mtu_flits": int,
               "target_flits": int},
}


def load_config(text=None, path="<default>"):
    """Parse and validate a configuration (TOML). Raises :class:`ConfigError` with
    ``path: [section] key: problem``."""
    text = DEFAULT_CONFIG if text is None else text
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    values = {}
    for section, body in data.items():
        if section not in _SECTIONS:
            raise ConfigError(f"{path}: [{section}]: unknown section (expected "
                             f"{', '.join('[' + s + ']' for s in _SECTIONS)})")
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: {section}: expected a [section] table")
        for key, value in body.items():
            where = f"{path}: [{section}] {key}"
            kind = _SECTIONS[section].get(key)
            if kind is None:
                raise ConfigError(f"{where}: unknown key")
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if kind is int and isinstance(value, bool) or not isinstance(value, kind):
                raise ConfigError(f"{where}: expected {kind.__name__}, got {value!r}")
            if kind is list:
                if not value:
                    raise ConfigError(f"{where}: must not be empty")
                value = tuple(value)
            values[key] = value
    config = replace(ExperimentConfig(), source=path, **values)
    _validate(config, path)
    return config


def _validate(c, path):
    from sim.gpu.collectives import ALGORITHMS
    from sim.gpu.presets import PRESETS
    from sim.gpu.workloads import MODELS

    def bad(section, key, problem):
        raise ConfigError(f"{path}: [{section}] {key}: {problem}")

    for w in c.workloads:
        if w not in MODELS:
            bad("experiment", "workloads", f"unknown model {w!r} (choose from "
                f"{', '.join(sorted(MODELS))})")
    if c.gpu not in PRESETS:
        bad("experiment", "gpu", f"unknown GPU {c.gpu!r} (choose from {', '.join(PRESETS)})")
    if not 2 <= c.gpus <= 64:
        bad("experiment", "gpus", f"must be 2..64, not {c.gpus}")
    for a in c.algorithms:
        if a not in ALGORITHMS or a == "direct":
            bad("experiment", "algorithms", f"{a!r} is not one of ring, tree, inswitch")
    for b in c.bucket_mb:
        if not isinstance(b, (int, float)) or isinstance(b, bool) or not 0 < b <= 4096:
            bad("experiment", "bucket_mb", f"{b!r} is not a size in MiB in (0, 4096]")
    for p in c.policies:
        if p not in Policy.names():
            bad("experiment", "policies", f"{p!r} is not one of {', '.join(Policy.names())}")
    if not 0 <= c.p2p_mb <= 4096:
        bad("experiment", "p2p_mb", f"must be 0..4096, not {c.p2p_mb}")
    if c.sim not in ("verilator", "icarus"):
        bad("experiment", "sim", f"must be verilator or icarus, not {c.sim!r}")
    for key, lo, hi in (("lanes", 1, 64), ("slots", 1, 4096), ("chunk_flits", 1, 256),
                        ("mtu_flits", 1, 4096), ("target_flits", 100, 10_000_000)):
        value = getattr(c, key)
        if not lo <= value <= hi:
            bad("switch", key, f"must be {lo}..{hi}, not {value}")


def points(config):
    """The cross product, in report order: (workload, bucket_mb, algorithm, policy)."""
    return list(itertools.product(config.workloads, config.bucket_mb, config.algorithms,
                                  config.policies))

"""An experiment's configuration (``innet run``, ``innet sweep``): the embedded default, parsing
and validating a TOML file, and the points of its cross product."""

import difflib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, fields, replace

from hw.arbiter import QUANTUM_BITS, WEIGHT_BITS
from hw.spec import Policy
from sim.errors import ConfigError

__all__ = ["ExperimentConfig", "load_config", "DEFAULT_CONFIG", "points", "MiB", "to_toml",
           "walk_sections"]


MiB = 1 << 20


#: The embedded default experiment (``innet run`` with no argument).
DEFAULT_CONFIG = """\
# innet run: the default experiment. Every key is optional; these are the defaults.
[experiment]
name = "default"
workloads = ["bert_large"]
gpu = "a100"
gpus = 8
algorithms = ["ring", "tree", "inswitch"]
bucket_mb = [25.0]
policies = ["rr", "prio"]
p2p_mb = 16.0          # activation gradients per GPU crossing a pipeline-stage boundary
traffic = ["dp", "fsdp"]  # contending traffic per point: dp, pp, tp, fsdp, offload
rtl = false            # RTL switch in the loop for the first bucket window of each point
rtl_windows = false    # RTL replays each point's first full bucket window at flit scale 1 (minutes)
sim = "verilator"

[switch]
lanes = 8              # 32 B flits at flit scale 1
slots = 256            # 256 x 256 B per 707 ns round trip = 93 GB/s, under ring's 171
chunk_flits = 8        # 256 B chunks
mtu_flits = 64
target_flits = 4000    # simulated gradient flits per GPU per iteration (sets the flit scale)
mem_weight = 1         # wrr: memory packets per turn of each ingress at an egress, 1..255
result_weight = 1      # wrr: reduction-result packets per turn at an egress, 1..255
quantum_flits = 0      # drr: flits per turn, 1..65535; 0 = one chunk
"""


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = "default"
    workloads: tuple = ("bert_large",)
    gpu: str = "a100"
    gpus: int = 8
    algorithms: tuple = ("ring", "tree", "inswitch")
    bucket_mb: tuple = (25.0,)
    policies: tuple = ("rr", "prio")
    p2p_mb: float = 16.0
    traffic: tuple = ("dp", "fsdp")
    rtl: bool = False
    rtl_windows: bool = False
    sim: str = "verilator"
    lanes: int = 8
    slots: int = 256
    chunk_flits: int = 8
    mtu_flits: int = 64
    target_flits: int = 4000
    mem_weight: int = 1
    result_weight: int = 1
    quantum_flits: int = 0
    source: str = "<default>"

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}


_SECTIONS = {
    "experiment": {"name": str, "workloads": list, "gpu": str, "gpus": int,
                   "algorithms": list, "bucket_mb": list, "policies": list, "p2p_mb": float,
                   "traffic": list, "rtl": bool, "rtl_windows": bool, "sim": str},
    "switch": {"lanes": int, "slots": int, "chunk_flits": int, "mtu_flits": int,
               "target_flits": int, "mem_weight": int, "result_weight": int,
               "quantum_flits": int},
}


def walk_sections(data, path, sections, suggest):
    """Each ``(section, key, value, where)`` of a parsed TOML file whose sections and keys are
    those of ``sections`` (section → its keys); ``where`` is ``path: [section] key``. An unknown
    section, a section that is not a table, or an unknown key (``suggest(section, key)`` adds a
    did-you-mean) raises :class:`ConfigError`. The experiment's and the scenarios' files share
    it."""
    for section, body in data.items():
        if section not in sections:
            raise ConfigError(f"{path}: [{section}]: unknown section (expected "
                              f"{', '.join('[' + s + ']' for s in sections)})"
                              f"{_did_you_mean(section, sections, '[{}]')}")
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: {section}: expected a [section] table")
        for key, value in body.items():
            where = f"{path}: [{section}] {key}"
            if key not in sections[section]:
                raise ConfigError(f"{where}: unknown key{suggest(section, key)}")
            yield section, key, value, where


def load_config(text=None, path="<default>"):
    """Parse and validate a configuration (TOML). Raises :class:`ConfigError` with
    ``path: [section] key: problem``."""
    text = DEFAULT_CONFIG if text is None else text
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    values = {}
    for section, key, value, where in walk_sections(data, path, _SECTIONS, _key_suggestion):
        kind = _SECTIONS[section][key]
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


def _did_you_mean(word, choices, form="{!r}"):
    """``"; did you mean X?"`` for the choice closest to ``word`` (difflib), or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {form.format(close[0])}?" if close else ""


def _key_suggestion(section, key):
    """The hint for an unknown ``key`` in ``[section]``: the closest key of that section, or
    the section that holds ``key`` (or a key close to it)."""
    hint = _did_you_mean(key, _SECTIONS[section])
    if hint:
        return hint
    for other, keys in _SECTIONS.items():
        if other != section and key in keys:
            return f"; it belongs in [{other}]"
    for other, keys in _SECTIONS.items():
        hint = _did_you_mean(key, keys, f"[{other}] {{}}")
        if other != section and hint:
            return hint
    return ""


#: Each key's comment in :data:`DEFAULT_CONFIG` (``to_toml`` repeats it).
_COMMENTS = {m.group(1): m.group(2) for m in
             (re.match(r"(\w+) = .*?(# .*)$", line) for line in DEFAULT_CONFIG.splitlines())
             if m}


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    return "[" + ", ".join(_toml_value(v) for v in value) + "]"


def to_toml(config):
    """``config`` as a TOML document that :func:`load_config` reads back to an equal
    configuration (all keys, in :data:`DEFAULT_CONFIG`'s sections and order, with its
    comments)."""
    origin = ("the embedded default" if config.source == "<default>"
              else f"{config.source} merged with the defaults")
    lines = [f"# innet run: the effective configuration ({origin})"]
    for section, keys in _SECTIONS.items():
        lines += ["", f"[{section}]"]
        for key in keys:
            line = f"{key} = {_toml_value(getattr(config, key))}"
            if key in _COMMENTS:
                line = f"{line:<22} {_COMMENTS[key]}"
            lines.append(line)
    return "\n".join(lines) + "\n"


def _validate(c, path):
    from sim.gpu.collectives import ALGORITHMS
    from sim.gpu.presets import PRESETS
    from sim.gpu.workloads import MODELS
    from sim.trace.traffic import TRAFFIC_KINDS

    def bad(section, key, problem):
        raise ConfigError(f"{path}: [{section}] {key}: {problem}")

    def hint(value, choices):
        return _did_you_mean(value, choices) if isinstance(value, str) else ""

    for w in c.workloads:
        if w not in MODELS:
            bad("experiment", "workloads", f"unknown model {w!r} (choose from "
                f"{', '.join(sorted(MODELS))}){hint(w, MODELS)}")
    if c.gpu not in PRESETS:
        bad("experiment", "gpu", f"unknown GPU {c.gpu!r} (choose from {', '.join(PRESETS)})"
            f"{hint(c.gpu, PRESETS)}")
    if not 2 <= c.gpus <= 64:
        bad("experiment", "gpus", f"must be 2..64, not {c.gpus}")
    for a in c.algorithms:
        if a not in ALGORITHMS or a in ("direct", "nvls"):   # nvls has no trace form
            bad("experiment", "algorithms", f"{a!r} is not one of ring, tree, inswitch"
                f"{hint(a, ('ring', 'tree', 'inswitch'))}")
    for b in c.bucket_mb:
        if not isinstance(b, (int, float)) or isinstance(b, bool) or not 0 < b <= 4096:
            bad("experiment", "bucket_mb", f"{b!r} is not a size in MiB in (0, 4096]")
    for p in c.policies:
        if p not in Policy.names():
            bad("experiment", "policies", f"{p!r} is not one of {', '.join(Policy.names())}"
                f"{hint(p, Policy.names())}")
    kinds = ("dp",) + TRAFFIC_KINDS
    for t in c.traffic:
        if t not in kinds:
            bad("experiment", "traffic", f"{t!r} is not one of {', '.join(kinds)}"
                f"{hint(t, kinds)}")
    if len(set(c.traffic)) != len(c.traffic):
        bad("experiment", "traffic", "names a kind twice")
    if not 0 <= c.p2p_mb <= 4096:
        bad("experiment", "p2p_mb", f"must be 0..4096, not {c.p2p_mb}")
    if c.sim not in ("verilator", "icarus"):
        bad("experiment", "sim", f"must be verilator or icarus, not {c.sim!r}")
    # The arbiter's run-time inputs are as wide as the RTL's (hw/arbiter.py); a wrr weight of
    # 0 would disable a traffic class, which a replay cannot finish.
    for key, lo, hi in (("lanes", 1, 64), ("slots", 1, 4096), ("chunk_flits", 1, 256),
                        ("mtu_flits", 1, 4096), ("target_flits", 100, 10_000_000),
                        ("mem_weight", 1, (1 << WEIGHT_BITS) - 1),
                        ("result_weight", 1, (1 << WEIGHT_BITS) - 1),
                        ("quantum_flits", 0, (1 << QUANTUM_BITS) - 1)):
        value = getattr(c, key)
        if not lo <= value <= hi:
            bad("switch", key, f"must be {lo}..{hi}, not {value}")


def points(config):
    """The cross product, in report order (the policies of a configuration side by side):
    (workload, bucket_mb, algorithm, policy, traffic)."""
    return [(w, b, a, p, t) for w, b, a, t in itertools.product(
        config.workloads, config.bucket_mb, config.algorithms, config.traffic)
        for p in config.policies]

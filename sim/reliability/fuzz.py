"""``innet bench fuzz``: property-based fuzzing (hypothesis) of the tools' inputs.

Three targets, each driven through the real command line in this process:

* **trace reader** — valid traces (binary and text) with random byte flips, truncations,
  insertions and line edits, through ``innet trace validate``;
* **configuration loader** — the default experiment with random keys deleted, values replaced
  by other types or out-of-range numbers, unknown keys and broken TOML, through
  ``innet run CONFIG`` (only configurations the loader rejects are run: a good one would start
  the experiment);
* **command-line arguments** — every subcommand with random options and values of which at
  least one is invalid.

The contract checked on every case: exit status 0 or 2 (1 for a failed check the command
reports), never an exception; with status 2, exactly one line on stderr, naming the file
and location for file inputs, with no Python traceback; no output file left behind.

Nothing of the command line is imported here (it imports this module for ``innet bench
fuzz``): the caller hands :func:`fuzz` the entry point to drive.
"""

import contextlib
import functools
import io
import random
import tempfile
from pathlib import Path

__all__ = ["fuzz", "TARGETS"]

TARGETS = ("trace", "config", "cli")


class Violation(AssertionError):
    """A case broke the bad-input contract."""


def _run(main, argv):
    """Run ``innet argv`` in this process through the entry point ``main``; returns (status,
    stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:   # argparse --help and friends
            status = exc.code
        except Exception as exc:   # noqa: BLE001 - the contract is "never an exception"
            raise Violation(f"innet {' '.join(argv)}: {type(exc).__name__}: {exc}") from exc
    return status, out.getvalue(), err.getvalue()


def _bind(main):
    """``_invoke(argv)``: :func:`_run` through ``main``.

    Each target's ``case`` calls it under this name, as it did when the module imported the
    command line itself: hypothesis derives a derandomized run's examples from the text of
    ``case``, so the same text keeps a seed drawing the same cases.
    """
    return functools.partial(_run, main)


def _check(argv, status, err, *, name_in_error=None, allowed=(0, 2)):
    where = f"innet {' '.join(map(str, argv))}"
    if status not in allowed:
        raise Violation(f"{where}: exit status {status}")
    if "Traceback" in err:
        raise Violation(f"{where}: traceback on stderr")
    if status == 2:
        lines = err.strip().splitlines()
        if len(lines) != 1:
            raise Violation(f"{where}: {len(lines)} lines on stderr, want 1: {err!r}")
        if name_in_error and name_in_error not in lines[0]:
            raise Violation(f"{where}: the error does not name {name_in_error}: {lines[0]}")


def _sample_trace(main, workdir, fmt):
    """A small valid trace (the GPU model's, with memory traffic), as bytes."""
    path = Path(workdir) / f"seed.{fmt}"
    argv = ["trace", "gen", "--model", "resnet50", "--gpus", "2", "--p2p-mb", "1",
            "--bucket-mb", "50", "-o", str(path)]
    status, _, err = _run(main, argv)
    if status != 0:
        raise RuntimeError(f"innet {' '.join(argv)} failed: {err}")
    return path.read_bytes()


def _mutate(data, rng, text):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        if not data:
            data += b"x"
        pos = rng.randrange(len(data))
        if op == 0:
            data[pos] ^= 1 << rng.randrange(8)
        elif op == 1:
            del data[pos:]
        elif op == 2:
            data[pos:pos] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 8)))
        elif op == 3 and text:
            lines = data.split(b"\n")
            i = rng.randrange(len(lines))
            fields = lines[i].split()
            if fields:
                fields[rng.randrange(len(fields))] = rng.choice(
                    [b"-1", b"nan", b"1e99", b"zz", b"", b"99999999999999999999", b"0x10"])
                lines[i] = b" ".join(fields)
            data = bytearray(b"\n".join(lines))
        else:
            del data[pos:pos + rng.randint(1, 16)]
    return bytes(data)


def _fuzz_trace(main, cases, seed, workdir, counts):
    from hypothesis import HealthCheck, given, settings, strategies as st

    _invoke = _bind(main)

    seeds = {fmt: _sample_trace(main, workdir, fmt) for fmt in ("itr", "txt")}

    @settings(max_examples=cases, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(["itr", "txt"]), st.integers(0, 2**32 - 1))
    def case(fmt, salt):
        rng = random.Random(seed * 7919 + salt)
        path = Path(workdir) / f"case.{fmt}"
        path.write_bytes(_mutate(seeds[fmt], rng, fmt == "txt"))
        argv = ["trace", "validate", str(path)]
        status, _, err = _invoke(argv)
        _check(argv, status, err, name_in_error=str(path))
        counts["cases"] += 1
        counts["rejected"] += status == 2

    case()
    return counts


_CONFIG_VALUES = ['"x"', "-1", "0", "1e400", "[]", "[1, 2]", '["nope"]', "true", "{}",
                  "99999999999", '"verilator"', '["ring", "bogus"]', '""', "3.5"]


def _fuzz_config(main, cases, seed, workdir, counts):
    from hypothesis import HealthCheck, given, settings, strategies as st

    from sim.errors import ConfigError
    from sim.experiment.config import DEFAULT_CONFIG, load_config

    _invoke = _bind(main)

    lines = DEFAULT_CONFIG.splitlines()
    keyed = [i for i, line in enumerate(lines)
             if "=" in line and not line.lstrip().startswith("#")]
    out_root = Path(workdir) / "results"

    @settings(max_examples=cases, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 2**32 - 1))
    def case(salt):
        rng = random.Random(seed * 104729 + salt)
        text = list(lines)
        for _ in range(rng.randint(1, 3)):
            i = rng.choice(keyed)
            key = text[i].split("=")[0].strip()
            op = rng.randrange(4)
            if op == 0:
                text[i] = f"{key} = {rng.choice(_CONFIG_VALUES)}"
            elif op == 1:
                text[i] = ""
            elif op == 2:
                text.insert(i, f"{key}_typo = 1")
            else:
                text[i] = text[i][:rng.randrange(len(text[i]) + 1)]
        path = Path(workdir) / "case.toml"
        path.write_text("\n".join(text))
        try:
            load_config(path.read_text(), str(path))
            counts["cases"] += 1   # a good configuration: the loader accepted it
            return
        except ConfigError:
            pass
        argv = ["run", str(path), "-o", str(out_root), "--name", "fuzz", "--quiet"]
        status, _, err = _invoke(argv)
        _check(argv, status, err, name_in_error=str(path))
        if status != 2:
            raise Violation(f"innet {' '.join(argv)}: the loader rejected it, the CLI did not")
        if (out_root / "fuzz").exists():
            raise Violation(f"innet {' '.join(argv)}: left {out_root / 'fuzz'} behind")
        counts["cases"] += 1
        counts["rejected"] += 1

    case()
    return counts


# Each command with options and values that are all invalid for that option, so every case
# is rejected before any real work starts.
_NOT_INT = ["x", "1.5", "", "0x", "1e3", "--", "٣"]
_NOT_POSITIVE = _NOT_INT + ["0", "-3"]
_COMMANDS = [
    (["export", "switch"], {"--ports": _NOT_POSITIVE + ["65", "1"], "--lanes": _NOT_POSITIVE,
                            "--slots": _NOT_POSITIVE + ["70000"],
                            "--chunk-flits": _NOT_POSITIVE, "--policy": ["lru", ""]}),
    (["export", "reduce"], {"--ports": _NOT_POSITIVE + ["99"], "--slots": _NOT_POSITIVE,
                            "--dtype": ["int64", "", "fp32,bf16"]}),
    (["export", "arbiter"], {"--ports": _NOT_POSITIVE, "--policy": ["lru", "", "RR2"]}),
    (["synth", "switch"], {"--ports": _NOT_POSITIVE, "--dtype": ["fp64", ""],
                           "--congestion": ["0", "-5", "x", "nan", "inf", ""],
                           "--placer": ["sa", "", "HEAP"], "--router": ["router3", ""],
                           "--seed": ["-1", "x", "1.5", "2147483648", ""],
                           "--seeds": _NOT_POSITIVE + ["65"],
                           "--timeout": ["0", "-1", "x", "nan", "inf", ""]}),
    (["trace", "gen", "-o", "{out}/gen.itr"], {"--model": ["alexnet", ""],
                                               "--gpus": _NOT_POSITIVE + ["1"],
                                               "--bucket-mb": ["-1", "x", "0", "nan"],
                                               "--algo": ["allgather", ""]}),
    (["model", "iteration"], {"--model": ["nope"], "--gpus": _NOT_POSITIVE,
                              "--gpu": ["tpu", ""]}),
    (["model", "collective"], {"--size": ["-1", "x", "inf", "12XB"],
                               "--gpus": _NOT_POSITIVE + ["1"], "--algo": ["bogus"]}),
    (["replay", "{out}/missing.itr"], {"--backend": ["fpga"], "--ports": _NOT_POSITIVE,
                                       "--slots": _NOT_POSITIVE}),
    (["bench", "soak"], {"--cycles": _NOT_POSITIVE, "--ports": _NOT_POSITIVE + ["2", "64"],
                         "--resets": ["-1", "x"]}),
    (["bench", "numerics"], {"--permutations": _NOT_POSITIVE,
                             "--ports": _NOT_POSITIVE + ["65"]}),
    (["bench", "equiv"], {"--against": ["no-such-revision", "", "HEAD~999999"],
                          "--cycles": _NOT_POSITIVE + ["9"], "--seeds": _NOT_POSITIVE + ["1001"],
                          "--ports": _NOT_POSITIVE + ["1", "64"], "--jobs": _NOT_POSITIVE + ["1"]}),
    (["formal", "reduce"], {"--ports": _NOT_POSITIVE, "--depth": _NOT_POSITIVE,
                            "--mode": ["cover"]}),
    (["run"], {"--jobs": _NOT_POSITIVE, "--bogus-option": ["1"]}),
]


def _fuzz_cli(main, cases, seed, workdir, counts):
    from hypothesis import HealthCheck, given, settings, strategies as st

    _invoke = _bind(main)

    before = set(Path(workdir).iterdir())

    @settings(max_examples=cases, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, len(_COMMANDS) - 1), st.integers(0, 2**32 - 1))
    def case(which, salt):
        rng = random.Random(seed * 31337 + salt)
        prefix, options = _COMMANDS[which]
        names = list(options)
        chosen = rng.sample(names, rng.randint(1, len(names)))
        argv = [a.replace("{out}", str(workdir)) for a in prefix]
        for name in chosen:
            argv += [name, rng.choice(options[name])]
        if rng.random() < 0.2:
            argv.insert(rng.randrange(len(argv) + 1), rng.choice(["--", "-x", "--json"]))
        status, _, err = _invoke(argv)
        _check(argv, status, err)
        if status != 2:
            raise Violation(f"innet {' '.join(argv)}: exit {status} for a bad argument")
        counts["cases"] += 1
        counts["rejected"] += 1

    case()
    after = set(Path(workdir).iterdir())
    if after - before:
        raise Violation(f"bad arguments left files behind: {sorted(map(str, after - before))}")
    return counts


def fuzz(cases=10_000, seed=1, targets=TARGETS, report=None, *, main):
    """Fuzz ``targets`` with ``cases`` cases in all (split evenly).

    Parameters
    ----------
    cases : int
        Cases over all targets, split evenly.
    seed : int
    targets : iterable of str
        Some of :data:`TARGETS`.
    report : dict, optional
        Filled with the per-target counts as they grow, for a caller that catches the failure.
    main : callable
        The command line's entry point, ``main(argv) -> exit status``
        (``sim.cli.main.main``); every case runs through it in this process.

    Returns
    -------
    dict
        ``{target: {"cases": int, "rejected": int}}``.

    Raises
    ------
    Violation
        On the first case that breaks the contract.
    """
    targets = list(targets)
    share = {t: cases // len(targets) + (i < cases % len(targets)) for i, t in enumerate(targets)}
    runners = {"trace": _fuzz_trace, "config": _fuzz_config, "cli": _fuzz_cli}
    report = {} if report is None else report
    with tempfile.TemporaryDirectory(prefix="innet-fuzz-") as workdir:
        cwd_files = set(Path.cwd().iterdir())
        for target in targets:
            report[target] = {"cases": 0, "rejected": 0}
            runners[target](main, max(1, share[target]), seed, workdir, report[target])
        stray = set(Path.cwd().iterdir()) - cwd_files
        if stray:
            raise Violation(f"fuzzing left files in {Path.cwd()}: {sorted(map(str, stray))}")
    return report

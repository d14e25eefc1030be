"""The import graph of ``hw/`` and ``sim/``, read statically (``ast``, no module is imported).

Every ``import`` and ``from ... import`` counts, at module level or inside a function (a lazy
import is still a dependency); relative imports are resolved against the importing module's
package. An import names the deepest module of the tree it reaches (``from sim.cli import
bench`` is an edge to ``sim.cli.bench``; ``from sim.cli.output import UsageError`` an edge to
``sim.cli.output``); a name outside the tree (``amaranth.lib``, ``numpy``, ``json``) is kept as
written. Importing a submodule also runs its packages' ``__init__``, but that implicit edge is
not counted: a package that re-exports its own submodules is not a cycle.

The rules (docs/architecture.md, STYLE.md 6, 18, 20):

* ``hw/`` imports only amaranth and the standard library;
* the GPU model and the trace format (``sim.gpu``, ``sim.trace``) import no cocotb and nothing
  of ``sim`` beyond themselves, ``sim.files`` and ``sim.errors``; of ``hw`` only the GPU model
  imports, and only the switch specification (``hw.spec``, and ``hw.errors`` for its
  exception), so that the in-switch collective is timed from the switch's own parameters;
* cocotb and its companions are imported only under ``sim.cosim``;
* nothing outside ``sim.cli`` imports ``sim.cli`` (models raise their own exceptions);
* no two modules import each other, directly or through others;
* ``sim/`` has at most three top-level modules besides ``__init__``; the rest is sub-packages.
"""

import ast
import itertools
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hw", "sim")
COCOTB = ("cocotb", "cocotb_tools", "cocotbext", "cocotb_bus")
MAX_SIM_TOP_LEVEL = 3


@dataclass(frozen=True)
class Import:
    """One import statement's reference to one module.

    Attributes
    ----------
    importer : str
        The importing module (``sim.cli.main``).
    path : str
        Its file, relative to the repository (``sim/cli/main.py``).
    line : int
        The line of the import statement.
    target : str
        The module imported: the deepest module of ``hw``/``sim`` it names, else the dotted
        name as written (absolute, relative imports resolved).
    statement : str
        The statement's source text, for messages.
    """

    importer: str
    path: str
    line: int
    target: str
    statement: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.statement}"


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules():
    """Every module of the tree: dotted name -> file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _within(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def _resolve(name):
    """The deepest module of the tree that ``name`` names, or ``name`` if outside it."""
    known = modules()
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return name


def _targets(node, importer, is_package):
    """The dotted names an import statement brings in (before :func:`_resolve`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = importer.split(".")
        if not is_package:
            base = base[:-1]
        if node.level > 1:
            base = base[:-(node.level - 1)]
        base = ".".join(base)
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module
    # ``from package import name``: ``name`` is a submodule or an attribute of ``package``.
    return [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules() else source
            for alias in node.names]


@cache
def imports():
    """Every import of the tree, in file and line order."""
    found = []
    for importer, path in modules().items():
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            statement = " ".join(ast.get_source_segment(text, node).split())
            for name in dict.fromkeys(_targets(node, importer, is_package)):
                found.append(Import(importer, str(path.relative_to(ROOT)), node.lineno,
                                    _resolve(name), statement))
    return sorted(found, key=lambda i: (i.path, i.line, i.target))


def _require_none(broken, rule):
    """Fail naming every offending file, line and import statement."""
    if broken:
        pytest.fail(f"{rule}:\n" + "\n".join(f"  {i}   (-> {i.target})" for i in broken),
                    pytrace=False)


def _top(name):
    return name.split(".")[0]


# -- the rules --------------------------------------------------------------------------------

def test_the_tree_is_found():
    """The graph covers the packages (a moved directory would make every rule pass vacuously)."""
    names = modules()
    assert "hw.switch" in names and "sim.cli.main" in names and "sim.gpu.iteration" in names
    assert any(i.target == "amaranth.hdl" or _within(i.target, "amaranth") for i in imports())


def test_hw_imports_only_amaranth_and_the_standard_library():
    broken = [i for i in imports() if _within(i.importer, "hw")
              and _top(i.target) not in ("hw", "amaranth")
              and _top(i.target) not in sys.stdlib_module_names]
    _require_none(broken, "hw/ may import only amaranth and the standard library")


#: What of ``hw`` the GPU model may read: the switch specification (and its exception), which
#: times the in-switch collective (docs/architecture.md, "Boundaries").
GPU_MODEL_HW = ("hw.spec", "hw.errors")


def test_gpu_model_and_trace_stand_alone():
    own = ("sim.gpu", "sim.trace", "sim.files", "sim.errors")
    broken = [i for i in imports()
              if (_within(i.importer, "sim.gpu") or _within(i.importer, "sim.trace"))
              and ((_top(i.target) == "hw" and not (_within(i.importer, "sim.gpu")
                                                   and i.target in GPU_MODEL_HW))
                   or _top(i.target) in COCOTB
                   or (_top(i.target) == "sim" and not any(_within(i.target, p) for p in own)))]
    _require_none(
        broken, "sim.gpu and sim.trace may not import cocotb or sim beyond sim.gpu, sim.trace, "
                "sim.files and sim.errors; of hw, only sim.gpu imports, and only hw.spec and "
                "hw.errors")


def test_cocotb_only_under_cosim():
    broken = [i for i in imports() if _top(i.target) in COCOTB
              and not _within(i.importer, "sim.cosim")]
    _require_none(broken, f"{', '.join(COCOTB)} may be imported only in sim.cosim")


def test_nothing_below_the_command_line_imports_it():
    broken = [i for i in imports() if _within(i.target, "sim.cli")
              and not _within(i.importer, "sim.cli")]
    _require_none(broken, "only sim.cli may import sim.cli (models raise their own "
                                       "exceptions; the CLI turns them into exit codes)")


def _cycles(edges):
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(edges.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _loop(component, edges):
    """One closed path through ``component``, from its first module back to it."""
    start, members = component[0], set(component)
    parent, frontier = {start: None}, [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(edges[node] & members):
                if succ == start:
                    path = [start]
                    while node is not None:
                        path.append(node)
                        node = parent[node]
                    return path[::-1]
                if succ not in parent:
                    parent[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no loop through {component}")


def test_no_import_cycles():
    known = modules()
    edges = {name: set() for name in known}
    first = {}   # (importer, target) -> the first statement that makes the edge
    for i in imports():
        if i.target in known and i.target != i.importer:
            edges[i.importer].add(i.target)
            first.setdefault((i.importer, i.target), i)
    lines = []
    for component in _cycles(edges):
        loop = _loop(component, edges)
        lines.append(f"cycle {' -> '.join(loop)} (every module on a cycle "
                     f"with it: {', '.join(component)}):")
        lines += [f"    {first[a, b]}" for a, b in itertools.pairwise(loop)]
    if lines:
        pytest.fail("import cycles between modules:\n" + "\n".join(lines), pytrace=False)


def test_sim_is_sub_packages():
    top = sorted(p.name for p in (ROOT / "sim").glob("*.py") if p.name != "__init__.py")
    if len(top) > MAX_SIM_TOP_LEVEL:
        pytest.fail(f"sim/ has {len(top)} top-level modules ({', '.join(top)}), at most "
                    f"{MAX_SIM_TOP_LEVEL} besides __init__: put the rest in the sub-package of "
                    f"their step", pytrace=False)


# -- the reader itself ------------------------------------------------------------------------

def test_relative_and_lazy_imports_are_resolved():
    """``from .packet import ...`` in hw/arbiter.py is an edge to hw.packet, and an import
    inside a function counts like one at the top."""
    edges = {(i.importer, i.target) for i in imports()}
    assert ("hw.arbiter", "hw.packet") in edges
    lazy = [i for i in imports() if i.importer == "sim.cli.bench"
            and i.target == "sim.bench.soak"]
    assert lazy, "the import inside sim/cli/bench.py's _cmd_bench_soak is missing"


def test_cycle_finder():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _loop(["a", "b", "c"], edges) == ["a", "b", "c", "a"]

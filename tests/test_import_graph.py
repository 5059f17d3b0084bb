"""The import graph of ``torchfair/``: no circle between modules, no module importing a layer above its own.

The graph (built from the source with :mod:`ast`, nothing is imported):

* **nodes** are the modules of ``torchfair/``, one per ``.py`` file (``torchfair/metrics/__init__.py`` is the node
  ``torchfair.metrics``, ``torchfair/metrics/prefix.py`` is ``torchfair.metrics.prefix``);
* **edges** are the import statements of a module, wherever they are: at module level, inside a function or a class,
  under ``if TYPE_CHECKING:`` or ``try:`` (a lazy import is still a dependency, and a circle of lazy imports is still
  a circle).  Relative imports are resolved against the importing module (``from .x import y`` in a package's
  ``__init__`` is relative to the package itself);
* an edge goes to **the module the statement names, not to the packages above it**.  ``import a.b.c`` and
  ``from a.b import c`` where ``a/b/c.py`` (or ``a/b/c/__init__.py``) exists are edges to ``a.b.c``;
  ``from a.b import name`` where ``name`` is not a submodule is an edge to ``a.b`` (its ``__init__``).  So
  ``from .. import browsing`` in ``torchfair/metrics/x.py`` is an edge to ``torchfair.browsing``, not to the root
  ``torchfair/__init__.py``, although Python runs every parent package's ``__init__`` first: that implicit step is
  the same for every module of a package and is not an edge (were it one, every module would sit in a circle with the
  root, which re-exports them);
* dynamic imports count when their target can be read from the source: ``importlib.import_module("a.b")`` with a
  string literal is an edge to ``a.b``; ``importlib.import_module(f"{__name__}.{...}")`` (a package's PEP 562
  loader) is an edge to each submodule of that package whose name appears as a string constant in the module.  An
  ``import_module`` of a run-time value (a class path from a user's config) is not an edge.

Layers, bottom to top (../shared/ARCHITECTURE.md); a module may import its own layer and the layers below:

====  ========================================================================
 0    ``torchfair.browsing``, ``torchfair._validation``, ``torchfair._linalg``, ``torchfair._extras``,
      ``torchfair._version`` (the ground: position weights and package-wide internals)
 1    ``torchfair.kernels`` (compiled kernels: arrays in, arrays out, nothing of torchfair above them)
 2    ``torchfair.orderings``
 3    ``torchfair.metrics`` (the measures, their declarations, the measure registry and the Metric classes)
 4    ``torchfair.losses``
 5    ``torchfair.rerank`` (re-rankers over the measures and orderings)
 6    ``torchfair.compat`` (FairRankTune's and expeval's conventions, number for number: over the measures and,
      for FairRankTune's ``Rankers`` such as ``DETCONSTSORT``, over :mod:`torchfair.rerank`)
 7    ``torchfair.evaluation``
 8    ``torchfair.data``
 9    ``torchfair.training``
10    ``torchfair.sweeps``
11    ``torchfair.cli``, ``torchfair._warmup`` (the applications: the commands, the compile-everything step)
12    ``torchfair`` (the package root ``torchfair/__init__.py`` alone, which only re-exports)
====  ========================================================================

``python tests/test_import_graph.py`` prints the counts (modules, edges, circles, the largest strongly connected
component, the upward imports with file:line).
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent

#: bottom to top; a module belongs to the layer of the most specific entry it equals or lies under (the root only
#: to itself, see EXACT); a module in no layer fails test_every_module_has_a_layer
LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("torchfair.browsing", "torchfair._validation", "torchfair._linalg", "torchfair._extras", "torchfair._version"),
    ("torchfair.kernels",),
    ("torchfair.orderings",),
    ("torchfair.metrics",),
    ("torchfair.losses",),
    ("torchfair.rerank",),
    ("torchfair.compat",),
    ("torchfair.evaluation",),
    ("torchfair.data",),
    ("torchfair.training",),
    ("torchfair.sweeps",),
    ("torchfair.cli", "torchfair._warmup", "torchfair.__main__"),
    ("torchfair",),
)
#: the layers whose entries name one module, not the modules under it: the package root is not the layer of every
#: module of the package
EXACT = {"torchfair"}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source} -> {self.target}"


def modules(root: Path = ROOT, package: str = "torchfair") -> Dict[str, Path]:
    """``{module name: file}`` of every module of ``root/package``."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _import_module_target(call: ast.Call, me: str, is_package: bool, constants: Set[str],
                          known: Dict[str, Path]) -> List[str]:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name != "import_module" or not call.args:
        return []
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if (isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.FormattedValue)
            and isinstance(arg.values[0].value, ast.Name) and arg.values[0].value.id == "__name__"):
        # a PEP 562 loader: f"{__name__}.{...}" -> the submodules of this package named in its source
        package = me if is_package else me.rpartition(".")[0]
        return [f"{package}.{c}" for c in sorted(constants) if f"{package}.{c}" in known]
    return []


def edges(root: Path = ROOT, package: str = "torchfair") -> List[Edge]:
    """Every import edge between the modules of ``root/package`` (see the module docstring for the rules)."""
    known = modules(root, package)
    found: List[Edge] = []
    for me, path in known.items():
        is_package = path.name == "__init__.py"
        base = me.split(".") if is_package else me.split(".")[:-1]
        tree = ast.parse(path.read_text(), str(path))
        constants = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        rel = str(path.relative_to(root))

        def add(target: str, line: int) -> None:
            # the module the statement names: the longest prefix of `target` that is a module of the package
            parts = target.split(".")
            for n in range(len(parts), 0, -1):
                candidate = ".".join(parts[:n])
                if candidate in known:
                    if candidate != me:
                        found.append(Edge(me, candidate, rel, line))
                    return

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    if node.level - 1 > len(base):
                        raise ValueError(f"{rel}:{node.lineno}: relative import beyond the top package")
                    stem = base[:len(base) - node.level + 1]
                    target = ".".join(stem + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    add(sub if sub in known else target, node.lineno)
            elif isinstance(node, ast.Call):
                for target in _import_module_target(node, me, is_package, constants, known):
                    add(target, node.lineno)
    return sorted(set(found), key=lambda e: (e.path, e.line, e.target))


def layer(module: str, layers: Sequence[Tuple[str, ...]] = LAYERS) -> int:
    """The rank of ``module``'s layer: the most specific entry of :data:`LAYERS` that it equals or lies under
    (:data:`EXACT` entries only match themselves)."""
    best: Optional[Tuple[int, int]] = None
    for rank, prefixes in enumerate(layers):
        for prefix in prefixes:
            if module == prefix or (prefix not in EXACT and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (rank, len(prefix))
    if best is None:
        raise KeyError(f"{module} is in no layer of tests/test_import_graph.py:LAYERS; add it")
    return best[0]


def upward(found: Iterable[Edge], layers: Sequence[Tuple[str, ...]] = LAYERS) -> List[Edge]:
    """The edges from a module to a layer above its own."""
    return [e for e in found if layer(e.target, layers) > layer(e.source, layers)]


def components(nodes: Iterable[str], found: Iterable[Edge]) -> List[List[str]]:
    """The strongly connected components of the graph (Tarjan, iterative), largest first."""
    graph: Dict[str, List[str]] = {n: [] for n in nodes}
    for e in found:
        graph.setdefault(e.source, []).append(e.target)
        graph.setdefault(e.target, [])
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    out.append(sorted(comp))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(out, key=lambda c: (-len(c), c))


def circles(nodes: Iterable[str], found: Iterable[Edge]) -> List[List[str]]:
    """The strongly connected components with more than one module: each holds at least one circle."""
    return [c for c in components(nodes, found) if len(c) > 1]


def report(root: Path = ROOT) -> str:
    known = modules(root)
    found = edges(root)
    comps = circles(known, found)
    up = upward(found)
    inside = {m: i for i, c in enumerate(comps) for m in c}
    lines = [f"modules: {len(known)}, import edges: {len(found)}",
             f"strongly connected components with a circle: {len(comps)}; sizes {[len(c) for c in comps]}; "
             f"largest {max((len(c) for c in comps), default=1)}",
             f"edges inside a circle: {sum(1 for e in found if inside.get(e.source, -1) == inside.get(e.target, -2))}",
             f"upward imports: {len(up)}"]
    lines += [f"  {e}" for e in up]
    for c in comps:
        lines.append(f"component of {len(c)}: {', '.join(c)}")
    return "\n".join(lines)


# --- the tests -------------------------------------------------------------------------------------------------

def test_every_module_has_a_layer():
    for module in modules():
        layer(module)


def test_no_circle_between_modules():
    comps = circles(modules(), edges())
    found = edges()
    detail = []
    for c in comps:
        members = set(c)
        detail.append(f"{len(c)} modules: " + "; ".join(str(e) for e in found
                                                        if e.source in members and e.target in members))
    assert not comps, "import circles in torchfair/ (lazy imports included):\n" + "\n".join(detail)


def test_no_upward_import():
    up = upward(edges())
    assert not up, "modules importing a layer above their own (tests/test_import_graph.py:LAYERS):\n" + \
        "\n".join(map(str, up))


def test_kernels_import_nothing_of_torchfair_above_them():
    bad = [e for e in edges() if e.source.startswith("torchfair.kernels") and layer(e.target) > layer(e.source)]
    assert not bad, "\n".join(map(str, bad))


def _plant(tmp_path: Path, files: Dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_graph_resolves_imports_as_documented(tmp_path):
    """Relative imports, ``from package import submodule`` (an edge to the submodule, not to the package's
    ``__init__``), ``from package import name`` (an edge to the ``__init__``), function-level and literal dynamic
    imports, and a PEP 562 loader."""
    root = _plant(tmp_path, {
        "torchfair/__init__.py": "from . import browsing\n",
        "torchfair/browsing.py": "",
        "torchfair/metrics/__init__.py": (
            "import importlib\nfrom .a import f\n_LAZY = {'F': 'b'}\n"
            "def __getattr__(name):\n    return importlib.import_module(f'{__name__}.{_LAZY[name]}')\n"),
        "torchfair/metrics/a.py": "from .. import browsing\nfrom . import b\nfrom . import g\n",
        "torchfair/metrics/b.py": "def h():\n    import importlib\n    importlib.import_module('torchfair.evaluation.x')\n",
        "torchfair/evaluation/__init__.py": "",
        "torchfair/evaluation/x.py": "def k():\n    from ..metrics.a import f\n    import torchfair.browsing\n",
    })
    got = {(e.source, e.target, e.line) for e in edges(root)}
    assert got == {
        ("torchfair", "torchfair.browsing", 1),
        ("torchfair.metrics", "torchfair.metrics.a", 2), ("torchfair.metrics", "torchfair.metrics.b", 5),
        ("torchfair.metrics.a", "torchfair.browsing", 1), ("torchfair.metrics.a", "torchfair.metrics.b", 2),
        ("torchfair.metrics.a", "torchfair.metrics", 3),
        ("torchfair.metrics.b", "torchfair.evaluation.x", 3),
        ("torchfair.evaluation.x", "torchfair.metrics.a", 2), ("torchfair.evaluation.x", "torchfair.browsing", 3),
    }


def test_the_checks_can_fail(tmp_path):
    """A planted lazy circle is found, and so is the upward edge in it."""
    root = _plant(tmp_path, {
        "torchfair/__init__.py": "",
        "torchfair/metrics/__init__.py": "def f():\n    from ..evaluation import metric\n",
        "torchfair/evaluation/__init__.py": "",
        "torchfair/evaluation/metric.py": "from ..metrics import f\n",
    })
    found = edges(root)
    assert circles(modules(root), found) == [["torchfair.evaluation.metric", "torchfair.metrics"]]
    assert [str(e) for e in upward(found)] == [
        "torchfair/metrics/__init__.py:2: torchfair.metrics -> torchfair.evaluation.metric"]


if __name__ == "__main__":
    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))

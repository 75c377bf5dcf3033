"""The import rules of docs/architecture.md, checked by reading the source (nothing is imported).

Three rules:

* **No circles.** No ambiqa module depends on itself through other ambiqa modules, counting
  every import: at module level, inside functions and under ``TYPE_CHECKING``. An import
  inside a function hides a circle from Python but not from the design, so it counts.
  A second check follows what Python really runs at import time (module-level imports plus
  the ``__init__`` of every package an import enters from outside): a circle there fails
  whenever the import starts from the wrong end.
* **Layers.** An ambiqa module imports only modules of its own layer or lower ones (see
  :data:`LAYERS`): foundation <- components (data, signatures, retrieval, evaluation) <-
  programs <- optimizers <- api/jobs <- cli/serve.

  Inside evaluation the jobs stack the same way (:data:`EVALUATION_JOBS`): scoring
  (``ambiqa.evaluation``) <- runs (``ambiqa.evaluation.runs``) <- reports
  (``ambiqa.evaluation.reports``); the reader's training (``ambiqa.reader_training``) uses
  scoring and nothing of it imports training.
* **Imports at the top.** An ambiqa module imports ambiqa modules at the top, in every
  package. An import inside a function is allowed only where it defers a heavy third-party
  library: the imported module loads one of :data:`HEAVY` at import time (itself or through
  its own module-level imports and the package ``__init__`` files they enter) that the
  importer does not already load (a deferral that saves nothing is not one). A failure names
  file:line and why; :func:`lazy_reasons` lists what each remaining lazy import defers.

Known exceptions are listed edge by edge in :data:`CYCLE_EDGES_ALLOWED`,
:data:`CLIMBS_ALLOWED` and :data:`LAZY_ALLOWED`, each with its reason; a listed edge that no
longer exists fails the test too, so the lists only shrink.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ambiqa"

#: layer number -> module prefixes (a prefix covers its submodules). Lower layers never import
#: higher ones. Same-layer imports are allowed (the circle test still applies).
LAYERS: dict[int, tuple[str, ...]] = {
    0: ("ambiqa.errors", "ambiqa.paths", "ambiqa.fsutil", "ambiqa.types", "ambiqa.tracing",
        "ambiqa.lm", "ambiqa.checks", "ambiqa.envutil", "ambiqa.parallel", "ambiqa.version",
        "ambiqa.text", "ambiqa.jsonio"),
    1: ("ambiqa.data", "ambiqa.signatures", "ambiqa.retrieval", "ambiqa.evaluation",
        "ambiqa.reader_training"),
    2: ("ambiqa.programs",),
    3: ("ambiqa.optimizers",),
    # the top-level package (its __init__ is the public API) and what sits beside it
    4: ("ambiqa", "ambiqa.api", "ambiqa.doctor", "ambiqa.testing",
        "ambiqa.testing_server"),
    5: ("ambiqa.cli", "ambiqa.serve"),
}
#: evaluation's jobs, lowest first: a module imports only its own job or lower ones (the
#: longest prefix wins, so ``ambiqa.evaluation`` itself is scoring); the reader's training
#: sits beside runs and reports, on scoring.
EVALUATION_JOBS: dict[str, int] = {
    "ambiqa.evaluation": 0,          # scoring: metrics, readers, judges, registry, stats
    "ambiqa.evaluation.runs": 1,     # the runner, its run directory, --part slices
    "ambiqa.evaluation.reports": 2,  # reports, comparisons, merge, plots, HTML
    "ambiqa.reader_training": 1,     # training the D-F1 reader
}
LAYER_NAMES = {0: "foundation", 1: "components", 2: "programs", 3: "optimizers", 4: "api",
               5: "cli/serve"}

#: (importer, imported) edges left out of the circle checks until their issue moves them.
CYCLE_EDGES_ALLOWED: dict[tuple[str, str], str] = {}  # none left (issue 36 broke the last)

#: (importer, imported) edges allowed to climb a layer until their issue moves them.
CLIMBS_ALLOWED: dict[tuple[str, str], str] = {}  # none left (issue 36 moved the last)


#: third-party libraries worth deferring (slow to import: DSPy, the model libraries, the
#: numeric, plotting and statistics stacks, the web server) -> the others of them each loads
#: itself (measured with ``sys.modules``), so a module that loads torch defers no numpy.
#: ``ambiqa --help`` loads none of them.
HEAVY: dict[str, frozenset[str]] = {
    "dspy": frozenset(), "litellm": frozenset(), "numpy": frozenset(),
    "torch": frozenset({"numpy"}),
    "transformers": frozenset({"numpy", "safetensors", "torch"}),
    "sentence_transformers": frozenset({"datasets", "numpy", "safetensors", "scipy", "torch",
                                        "transformers"}),
    "safetensors": frozenset(), "faiss": frozenset({"numpy"}),
    "colbert": frozenset({"faiss", "numpy", "safetensors", "scipy", "torch", "transformers"}),
    "xllamacpp": frozenset(), "llama_cpp": frozenset({"numpy"}),
    "scipy": frozenset({"numpy"}), "matplotlib": frozenset({"numpy"}),
    "optuna": frozenset({"numpy"}), "rouge_score": frozenset(),
    "nltk": frozenset({"numpy", "scipy"}), "datasets": frozenset({"numpy"}),
    "bm25s": frozenset({"numpy", "scipy"}),
    "fastapi": frozenset({"starlette"}), "starlette": frozenset(), "uvicorn": frozenset(),
}

#: (importer, imported) function-level imports that defer nothing but stay inside a
#: function, each with its reason (e.g. a circle at import time no other cut avoids).
LAZY_ALLOWED: dict[tuple[str, str], str] = {
    # a cycle breaker: ambiqa.lm's __init__ imports lm.embedded, which imports tracing;
    # importing lm.redact enters that __init__ (moving redact below both would end it)
    ("ambiqa.tracing", "ambiqa.lm.redact"): "circle through ambiqa.lm's __init__",
    # issue 44: ambiqa/serve/ is being reworked by other work in progress; move these up there
    ("ambiqa.serve.app", "ambiqa.serve.page"): "issue 44 (serve)",
}


#: what ``ambiqa.cli`` may import besides ``ambiqa``, ``ambiqa.api``, ``ambiqa.errors``, its own
#: modules and ``ambiqa.serve`` (its peer: ``serve`` starts the app). Issue 44: the CLI parses
#: flags into settings and calls the api; each edge below still reaches past it. The list may
#: only shrink (an edge no longer made fails the test that reads it).
_LIGHT = "the parser and --help read it without loading DSPy (the api loads DSPy)"
CLI_PAST_API_ALLOWED: dict[tuple[str, str], str] = {
    ("ambiqa.cli", "ambiqa.lm.redact"): "credentials out of every error line, before DSPy",
    ("ambiqa.cli.catalog", "ambiqa.optimizers.registry"): _LIGHT,
    ("ambiqa.cli.catalog", "ambiqa.programs.registry"): _LIGHT,
    ("ambiqa.cli.common", "ambiqa.jsonio"): "--program-config's depth guard",
    ("ambiqa.cli.common", "ambiqa.programs.registry"): "issue 44: ask's program_or_artifact",
    ("ambiqa.cli.common", "ambiqa.retrieval.factory"): "issue 44: retriever_from_args",
    ("ambiqa.cli.optimize_cmds", "ambiqa.checks"): "issue 44: compile/tune path",
    ("ambiqa.cli.optimize_cmds", "ambiqa.data"): "issue 44: compile/tune path",
    ("ambiqa.cli.optimize_cmds", "ambiqa.evaluation.registry"): "issue 44: compile/tune path",
    ("ambiqa.cli.optimize_cmds", "ambiqa.fsutil"): "issue 44: compile/tune path",
    ("ambiqa.cli.optimize_cmds", "ambiqa.optimizers.compile"): "issue 44: compile/tune path",
    ("ambiqa.cli.optimize_cmds", "ambiqa.optimizers.demo_plan"): _LIGHT,
    ("ambiqa.cli.optimize_cmds", "ambiqa.optimizers.estimate"): "issue 44: --dry-run",
    ("ambiqa.cli.optimize_cmds", "ambiqa.optimizers.export"): "issue 44: export path",
    ("ambiqa.cli.optimize_cmds", "ambiqa.optimizers.recipes"): _LIGHT,
    ("ambiqa.cli.optimize_cmds", "ambiqa.optimizers.splits"): "issue 44: compile/tune path",
    ("ambiqa.cli.optimize_cmds", "ambiqa.optimizers.tune"): "issue 44: compile/tune path",
    ("ambiqa.cli.optimize_cmds", "ambiqa.programs.registry"): _LIGHT,
    ("ambiqa.cli.reader_cmds", "ambiqa.evaluation.extractive"): "issue 44: reader commands",
    ("ambiqa.cli.reader_cmds", "ambiqa.jsonio"): "issue 44: reader commands",
    ("ambiqa.cli.reader_cmds", "ambiqa.evaluation.shipped_reader"):
        "issue 42: `ambiqa reader install`",
    ("ambiqa.cli.reader_cmds", "ambiqa.reader_training"): "issue 44: reader commands",
    ("ambiqa.cli.retrieval_cmds", "ambiqa.data"): "issue 44: index commands",
    ("ambiqa.cli.retrieval_cmds", "ambiqa.data.corpus"): "issue 44: index commands",
    ("ambiqa.cli.retrieval_cmds", "ambiqa.doctor"): "issue 44: doctor",
    ("ambiqa.cli.retrieval_cmds", "ambiqa.paths"): "issue 44: index commands",
    ("ambiqa.cli.retrieval_cmds", "ambiqa.retrieval.adding"): "issue 44: index commands",
    ("ambiqa.cli.retrieval_cmds", "ambiqa.retrieval.checkpoint"): "issue 44: index commands",
    ("ambiqa.cli.retrieval_cmds", "ambiqa.retrieval.kinds"): _LIGHT,
    ("ambiqa.cli.retrieval_cmds", "ambiqa.retrieval.training"): "issue 44: index commands",
    ("ambiqa.cli.retrieval_cmds", "ambiqa.retrieval.triples"): "issue 44: index commands",
    ("ambiqa.cli.scale_cmds", "ambiqa.evaluation.reports.merge"): "issue 44: merge",
    ("ambiqa.cli.serve_cmds", "ambiqa.lm.redact"): "credentials out of the server's log",
}

@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    where: str  # "module", "function" or "type-checking"


def _module_name(path: Path, root: Path = ROOT) -> tuple[str, bool]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def modules(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Every ambiqa module under ``root``: name -> (file, is a package's __init__)."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        name, is_package = _module_name(path, root)
        out[name] = (path, is_package)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _visit(node: ast.AST, where: str, name: str, base: str,
           mods: dict[str, tuple[Path, bool]], known: Any, found: list[Import]) -> None:
    """Record the ambiqa imports under ``node``; ``where`` says what encloses them."""
    def add(target: str | None, stmt: ast.stmt) -> None:
        if target and target != name:
            found.append(Import(name, target, stmt.lineno, where))

    for child in ast.iter_child_nodes(node):
        inner = where
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = "function" if where == "module" else where
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            inner = "type-checking"
        if isinstance(child, ast.Import):
            for alias in child.names:
                if alias.name.split(".")[0] == PACKAGE:
                    add(known(alias.name), child)
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                anchor = base
                for _ in range(child.level - 1):
                    anchor = anchor.rpartition(".")[0]
                source = f"{anchor}.{child.module}" if child.module else anchor
            else:
                source = child.module or ""
            if source.split(".")[0] == PACKAGE:
                for alias in child.names:
                    full = f"{source}.{alias.name}"
                    add(full if full in mods else known(source), child)
        _visit(child, inner, name, base, mods, known, found)


def imports(mods: dict[str, tuple[Path, bool]] | None = None) -> list[Import]:
    """Every import of an ambiqa module by an ambiqa module, with where it sits."""
    mods = modules() if mods is None else mods

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    found: list[Import] = []
    for name, (path, is_package) in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        base = name if is_package else name.rpartition(".")[0]
        _visit(tree, "module", name, base, mods, known, found)
    return found


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer): the longest prefix wins
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), layer)
    return None if best is None else best[1]


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle in the graph (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = dfs(node)
            if found:
                return found
    return None


def _where(found: list[Import], cycle: list[str]) -> str:
    lines = []
    for a, b in zip(cycle, cycle[1:], strict=False):
        hit = next(i for i in found if i.importer == a and i.imported == b)
        lines.append(f"  {a} (line {hit.line}, {hit.where}) imports {b}")
    return "\n".join(lines)


def design_graph(found: list[Import]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for imp in found:
        if (imp.importer, imp.imported) not in CYCLE_EDGES_ALLOWED:
            edges.setdefault(imp.importer, set()).add(imp.imported)
    return edges


def entered(importer: str, imported: str, mods: dict[str, tuple[Path, bool]]) -> list[str]:
    """The modules an import runs: ``imported`` and each package above it that does not
    enclose ``importer`` (the importer's own packages are already running)."""
    targets = [imported]
    parent = imported.rpartition(".")[0]
    while parent:
        if parent in mods and not (importer + ".").startswith(parent + "."):
            targets.append(parent)
        parent = parent.rpartition(".")[0]
    return targets


def import_time_graph(found: list[Import], mods: dict[str, tuple[Path, bool]]
                      ) -> tuple[dict[str, set[str]], list[Import]]:
    """What runs at import: module-level imports, plus the ``__init__`` of each package an
    import enters from outside it (a module's own enclosing packages are already running)."""
    edges: dict[str, set[str]] = {}
    shown: list[Import] = []
    for imp in found:
        if imp.where != "module" or (imp.importer, imp.imported) in CYCLE_EDGES_ALLOWED:
            continue
        for target in entered(imp.importer, imp.imported, mods):
            edges.setdefault(imp.importer, set()).add(target)
            shown.append(Import(imp.importer, target, imp.line, "module"))
    return edges, shown


def _heavy_at_top(node: ast.AST) -> list[str]:
    """The :data:`HEAVY` libraries imported at import time under ``node`` (module level, class
    bodies, ``try``/``if`` blocks; not inside functions, not under ``TYPE_CHECKING``)."""
    libs: list[str] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for n in child.orelse:
                libs += _heavy_at_top(n)
            continue
        names: list[str] = []
        if isinstance(child, ast.Import):
            names = [a.name for a in child.names]
        elif isinstance(child, ast.ImportFrom) and not child.level:
            names = [child.module or ""]
        libs += [lib.split(".")[0] for lib in names if lib.split(".")[0] in HEAVY]
        libs += _heavy_at_top(child)
    return libs


def heavy_modules(mods: dict[str, tuple[Path, bool]], found: list[Import]
                  ) -> dict[str, dict[str, str]]:
    """Every ambiqa module that loads :data:`HEAVY` libraries when imported -> each library
    and how (``"dspy"`` or ``"dspy (through ambiqa.x)"``), following what Python runs at
    import time (:func:`import_time_graph`, plus a module's own packages, which run first)."""
    heavy: dict[str, dict[str, str]] = {}
    for name, (path, _) in mods.items():
        for lib in _heavy_at_top(ast.parse(path.read_text(encoding="utf-8"),
                                           filename=str(path))):
            heavy.setdefault(name, {})[lib] = lib
            for other in HEAVY[lib]:
                heavy[name].setdefault(other, f"{other} (through {lib})")
    edges, _ = import_time_graph(found, mods)
    for name in mods:
        parent = name.rpartition(".")[0]
        if parent in mods:
            edges.setdefault(name, set()).add(parent)
    changed = True
    while changed:
        changed = False
        for importer, targets in sorted(edges.items()):
            for target in sorted(targets):
                for lib in heavy.get(target, {}):
                    if lib not in heavy.get(importer, {}):
                        heavy.setdefault(importer, {})[lib] = f"{lib} (through {target})"
                        changed = True
    return heavy


def _deferred(imp: Import, mods: dict[str, tuple[Path, bool]],
              heavy: dict[str, dict[str, str]]) -> dict[str, str]:
    """The heavy libraries a function-level import loads that its importer does not."""
    had = heavy.get(imp.importer, {})
    out: dict[str, str] = {}
    for target in entered(imp.importer, imp.imported, mods):
        for lib, how in heavy.get(target, {}).items():
            if lib not in had:
                out.setdefault(lib, how)
    return out


def lazy_imports_deferring_nothing(mods: dict[str, tuple[Path, bool]], found: list[Import],
                                   allowed: dict[tuple[str, str], str]) -> list[str]:
    """Function-level ambiqa imports that break the rule, as ``file:line: why`` lines: the
    imported module loads no heavy library the importer does not already load."""
    heavy = heavy_modules(mods, found)
    bad: list[tuple[str, int, str]] = []
    for imp in found:
        if imp.where != "function" or (imp.importer, imp.imported) in allowed:
            continue
        if _deferred(imp, mods, heavy):
            continue
        had = heavy.get(imp.importer)
        why = (f"{imp.importer} already loads {', '.join(sorted(had.values()))}" if had
               else f"{imp.imported} loads no heavy library")
        path = mods[imp.importer][0]
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        bad.append((str(shown), imp.line,
                    f"  {shown}:{imp.line}: imports {imp.imported} in a function; {why}"))
    return [line for *_, line in sorted(set(bad))]


def lazy_reasons(mods: dict[str, tuple[Path, bool]] | None = None
                 ) -> dict[tuple[str, str, int], str]:
    """Each function-level ambiqa import the rule keeps -> the heavy libraries it defers (the
    reason it stays lazy). To read them: ``python -c "from tests.test_architecture import
    lazy_reasons; print(*lazy_reasons().items(), sep=chr(10))"``."""
    mods = modules() if mods is None else mods
    found = imports(mods)
    heavy = heavy_modules(mods, found)
    out = {}
    for imp in found:
        deferred = _deferred(imp, mods, heavy) if imp.where == "function" else {}
        if deferred:
            out[(imp.importer, imp.imported, imp.line)] = ", ".join(sorted(deferred.values()))
    return out


# ---- the rules ----------------------------------------------------------------------------

def test_the_import_walk_sees_every_kind_of_import() -> None:
    """The walker is the test's foundation: check it on the kinds it must see."""
    found = imports()
    kinds = {i.where for i in found}
    assert kinds == {"module", "function", "type-checking"}, kinds
    pairs = {(i.importer, i.imported) for i in found}
    assert ("ambiqa.programs.diva", "ambiqa.signatures.disambiguation") in pairs
    assert len(found) > 300


def test_find_cycle_finds_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}}) is None


def test_import_time_graph_sees_a_circle_through_a_package_init() -> None:
    """The case this check exists for: ``s`` imports ``p.m`` (so ``p``'s __init__ runs), that
    __init__ re-exports ``p.i``, and ``p.i`` imports ``s`` -- a circle no single edge shows.
    A module's own package is not an edge (it is already running when the module runs)."""
    fake = Path("x.py")
    mods = {"p": (fake, True), "p.m": (fake, False), "p.i": (fake, False), "s": (fake, False)}
    found = [Import("s", "p.m", 1, "module"), Import("p", "p.i", 1, "module"),
             Import("p.i", "s", 1, "module"), Import("p.i", "p.m", 2, "module")]
    edges, _ = import_time_graph(found, mods)
    assert find_cycle(edges) == ["p", "p.i", "s", "p"]
    assert "p" not in edges["p.i"]  # p.i -> p.m adds no edge to its own package


def test_no_import_circles_among_ambiqa_modules() -> None:
    found = imports()
    cycle = find_cycle(design_graph(found))
    assert cycle is None, ("import circle (move what both sides need to a lower module):\n"
                           + _where(found, cycle))


def test_no_circles_at_import_time_through_package_inits() -> None:
    mods = modules()
    edges, shown = import_time_graph(imports(mods), mods)
    cycle = find_cycle(edges)
    assert cycle is None, ("circle at import time (a package __init__ re-exports a module "
                           "that imports back into the package):\n" + _where(shown, cycle))


def test_every_module_has_a_layer() -> None:
    missing = sorted(m for m in modules() if layer_of(m) is None)
    assert not missing, f"add these modules to LAYERS in {__file__}: {missing}"


def test_every_layer_prefix_names_a_module() -> None:
    """A prefix left behind by a move or a rename would hide nothing, but misleads."""
    mods = modules()
    stale = sorted(p for prefixes in LAYERS.values() for p in prefixes if p not in mods)
    assert not stale, f"remove these from LAYERS (no such module): {stale}"


def test_no_import_climbs_a_layer() -> None:
    climbs = []
    for imp in imports():
        low, high = layer_of(imp.importer), layer_of(imp.imported)
        if low is None or high is None or high <= low:
            continue
        if (imp.importer, imp.imported) in CLIMBS_ALLOWED:
            continue
        climbs.append(f"  {imp.importer} (line {imp.line}, {imp.where}, "
                      f"{LAYER_NAMES[low]}) imports {imp.imported} ({LAYER_NAMES[high]})")
    assert not climbs, ("imports that climb a layer (docs/architecture.md): move the shared "
                        "piece down, or let the caller pass it in:\n" + "\n".join(climbs))


def test_an_ambiqa_import_inside_a_function_defers_a_heavy_library() -> None:
    mods = modules()
    bad = lazy_imports_deferring_nothing(mods, imports(mods), LAZY_ALLOWED)
    assert not bad, ("import these ambiqa modules at the top (an import inside a function is "
                     "for deferring a heavy library the importer does not already load; see "
                     "HEAVY):\n" + "\n".join(bad))


def test_the_lazy_import_rule_catches_imports_that_defer_nothing(tmp_path: Path) -> None:
    """The rule on a small fake tree: deferring a heavy module is allowed; a light module,
    an importer that already loads the library (but not one that loads another), and a
    heavy package entered through its ``__init__`` are told apart."""
    files = {
        "__init__.py": "",
        "light.py": "X = 1\n",
        "heavy.py": "import torch\n",
        "via.py": "from ambiqa import heavy\n",  # heavy through a module-level import
        "pkg/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                           "    import dspy\ntry:\n    import dspy\nexcept ImportError:\n"
                           "    dspy = None\n",
        "pkg/leaf.py": "Y = 2\n",
        "user.py": ("def ok():\n    from ambiqa import heavy\n"
                    "def ok_via():\n    from ambiqa.via import heavy\n"
                    "def ok_pkg():\n    from ambiqa.pkg.leaf import Y\n"
                    "def bad():\n    from ambiqa.light import X\n"
                    "def bad_relative():\n    from .light import X\n"),
        "loaded.py": ("import torch\n"
                      "def bad():\n    from ambiqa import heavy\n"
                      "def allowed():\n    from ambiqa.light import X\n"),
        "other_lib.py": "import numpy\ndef ok():\n    from ambiqa import heavy\n",
        "pkg/inside.py": "def bad():\n    from ambiqa.pkg.leaf import Y\n",
    }
    for rel, text in files.items():
        (tmp_path / PACKAGE / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / PACKAGE / rel).write_text(text)
    mods = modules(tmp_path)
    found = imports(mods)
    heavy = heavy_modules(mods, found)
    assert heavy["ambiqa.heavy"] == {"torch": "torch", "numpy": "numpy (through torch)"}
    assert heavy["ambiqa.pkg"] == {"dspy": "dspy"}
    assert heavy["ambiqa.via"]["torch"] == "torch (through ambiqa.heavy)"
    assert "ambiqa.light" not in heavy and "ambiqa.user" not in heavy
    bad = lazy_imports_deferring_nothing(mods, found, {("ambiqa.loaded", "ambiqa.light"): "x"})
    assert [line.split(": imports ")[0].rsplit("/", 1)[-1] for line in bad] == [
        "loaded.py:3", "inside.py:2", "user.py:8", "user.py:10"], bad
    assert "ambiqa.loaded already loads" in bad[0] and "torch" in bad[0]
    assert "ambiqa.pkg.inside already loads dspy (through ambiqa.pkg)" in bad[1]
    assert "ambiqa.light loads no heavy library" in bad[2] and "ambiqa.light" in bad[3]


def _job_of(module: str) -> tuple[str, int] | None:
    best = max((p for p in EVALUATION_JOBS if module == p or module.startswith(p + ".")),
               key=len, default=None)
    return None if best is None else (best, EVALUATION_JOBS[best])


def test_evaluation_jobs_import_only_their_own_or_lower_ones() -> None:
    wrong = []
    for imp in imports():
        low, high = _job_of(imp.importer), _job_of(imp.imported)
        if low is None or high is None or low[0] == high[0]:
            continue
        if high[1] >= low[1]:  # a higher job, or a sibling (runs <-> reports' peer training)
            wrong.append(f"  {imp.importer} (line {imp.line}, {imp.where}) imports "
                         f"{imp.imported}")
    assert not wrong, ("evaluation's jobs stack scoring <- runs <- reports, training beside "
                       "runs (pass the higher piece in, as the runner takes its report "
                       "writer):\n" + "\n".join(wrong))


def test_allow_lists_only_name_edges_that_exist() -> None:
    """A fixed exception must leave its list, so the lists only shrink."""
    found = imports()
    pairs = {(i.importer, i.imported) for i in found}
    lazy = {(i.importer, i.imported) for i in found if i.where == "function"}
    stale = (sorted(set(CYCLE_EDGES_ALLOWED) - pairs) + sorted(set(CLIMBS_ALLOWED) - pairs)
             + sorted(set(LAZY_ALLOWED) - lazy))
    assert not stale, f"remove these fixed edges from the allow-lists: {stale}"


def _past_api(target: str) -> bool:
    """Whether a CLI import of ``target`` reaches past the api (see CLI_PAST_API_ALLOWED)."""
    own = ("ambiqa.api.", "ambiqa.cli.", "ambiqa.serve.")
    return target not in ("ambiqa", "ambiqa.api", "ambiqa.errors", "ambiqa.cli",
                          "ambiqa.serve") and not target.startswith(own)


def test_cli_reaches_past_the_api_only_where_listed() -> None:
    """The CLI parses flags into settings and calls ``ambiqa.api`` (issue 44): a new import of
    a lower package from ``ambiqa/cli/`` fails here, and a listed one no longer made must
    leave the list, so it only shrinks."""
    edges = {(i.importer, i.imported) for i in imports()
             if (i.importer == "ambiqa.cli" or i.importer.startswith("ambiqa.cli."))
             and _past_api(i.imported)}
    new = sorted(edges - set(CLI_PAST_API_ALLOWED))
    stale = sorted(set(CLI_PAST_API_ALLOWED) - edges)
    assert not new, ("the CLI calls ambiqa.api (or ambiqa): move these behind an api verb, "
                     f"or list them with their reason: {new}")
    assert not stale, f"remove these fixed edges from CLI_PAST_API_ALLOWED: {stale}"

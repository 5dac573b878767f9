"""The layout holds: project modules import each other without a cycle (imports inside functions
count), and neither do the packages (models.target and models.fit, say); core/ imports no model
library; floors point down (scripts -> measure -> models -> core; app -> models -> core); a file
over MAX_LINES says why in its docstring. Every module of every subpackage counts. Read from
the source with ast; nothing is imported."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "models", "measure", "app", "scripts")
MODEL_LIBRARIES = {"torch", "transformers", "llama_cpp"}
MAX_LINES = 350


def dotted(path: Path) -> str:
    """models/target/static.py -> 'models.target.static'; a package's __init__ -> the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """'models.target.static' -> its file, for every module and package of the floors, at any
    depth (a subpackage's __init__ counts as the package)."""
    return {dotted(path): path for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
            if dotted(path) not in PACKAGES}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module `name` imports, anywhere in the file: project modules by their dotted
    name, others by their top-level package. Scripts import each other by bare name."""
    pkg, out = name.split(".")[0], set()
    here = name if path.stem == "__init__" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package (or one above)
                up = here.split(".")[:len(here.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            if f"{pkg}.{t}" in known and pkg == "scripts":
                out.add(f"{pkg}.{t}")
            elif t in known:
                out.add(t)
            elif t and t.split(".")[0] not in PACKAGES:
                out.add(t.split(".")[0])
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imported(name, path, set(mods)) for name, path in mods.items()}


def package_graph() -> dict[str, set[str]]:
    """The same imports between packages: 'models.target' -> 'models.fit' when a module of the
    first imports one of the second (a package's own __init__ belongs to it)."""
    mods, edges = modules(), {}
    def package(name: str) -> str:
        return name if mods[name].stem == "__init__" else name.rpartition(".")[0]
    for name, deps in graph().items():
        own = package(name)
        out = edges.setdefault(own, set())
        out |= {package(d) for d in deps if d in mods and package(d) != own
                and not own.startswith(package(d) + ".") and package(d) not in PACKAGES}
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the project modules, as a path that comes back, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in edges:
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_walk_sees_the_imports():
    edges = graph()
    assert "core.engine" in edges and "core.rounds" in edges["core.engine"]
    assert "models.pairs.catalog" in edges["models.loader"]
    assert "llama_cpp" in edges["models.draft.llama"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_package_cycle():
    cycle = find_cycle(package_graph())
    assert cycle is None, "package cycle: " + " -> ".join(cycle)


def test_core_imports_no_model_library():
    bad = {name: sorted(deps & MODEL_LIBRARIES) for name, deps in graph().items()
           if name.startswith("core.") and deps & MODEL_LIBRARIES}
    assert not bad, f"core/ must not import model libraries: {bad}"


def test_floors_point_down():
    """core imports nothing above it; models imports neither app, measure nor scripts; measure
    (the benchmarks' library) imports neither app nor scripts; app does not import measure."""
    above = {"core": ("models.", "measure.", "app.", "scripts."),
             "models": ("measure.", "app.", "scripts."), "measure": ("app.", "scripts."),
             "app": ("measure.", "scripts.")}
    bad = {name: sorted(d for d in deps if d.startswith(above[name.split(".")[0]]))
           for name, deps in graph().items() if name.split(".")[0] in above}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


def test_long_files_say_why():
    long = []
    for name, path in modules().items():
        lines = len(path.read_text().splitlines())
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_LINES and "long:" not in doc:
            long.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert not long, f"over {MAX_LINES} lines with no 'long:' reason in the docstring: {long}"

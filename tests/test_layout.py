"""The layout holds: project modules import each other without a cycle (imports inside functions
count), core/ imports no model library, and a file over MAX_LINES says why in its docstring.
Read from the source with ast; nothing is imported."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "models", "app", "scripts")
MODEL_LIBRARIES = {"torch", "transformers", "llama_cpp"}
MAX_LINES = 350


def modules() -> dict[str, Path]:
    """'core.engine' -> its file, for every module of the four floors."""
    return {f"{pkg}.{path.stem}": path for pkg in PACKAGES
            for path in sorted((ROOT / pkg).glob("*.py")) if path.stem != "__init__"}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module `name` imports, anywhere in the file: project modules by their dotted
    name, others by their top-level package. Scripts import each other by bare name."""
    pkg, out = name.split(".")[0], set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package
                base = f"{pkg}.{base}" if base else pkg
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
    assert "core.engine" in edges and "core.scheduler" in edges["core.engine"]
    assert "models.catalog" in edges["models.loader"]
    assert "llama_cpp" in edges["models.draft_llama"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_core_imports_no_model_library():
    bad = {name: sorted(deps & MODEL_LIBRARIES) for name, deps in graph().items()
           if name.startswith("core.") and deps & MODEL_LIBRARIES}
    assert not bad, f"core/ must not import model libraries: {bad}"


def test_floors_point_down():
    """core imports nothing above it; models does not import app or scripts."""
    above = {"core": ("models.", "app.", "scripts."), "models": ("app.", "scripts.")}
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

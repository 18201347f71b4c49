"""The package's layers, checked: every import in refinekit points down (docs/architecture.md).

Each module is read with `ast` (imports at module level, inside functions and under
`TYPE_CHECKING` alike), and each refinekit module it imports must sit in its own layer or one
below; a module's layer is its folder. No import closes a cycle (at module level, inside a
function or under `TYPE_CHECKING` alike), and the package root holds only the public modules
and one folder per layer.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "refinekit"
PLUGIN = ROOT / "_refinekit_pytest_plugin.py"

# lowest first; a module may import its own layer and those below it. A module's layer is
# its folder (its first name below `refinekit`): a new module in a folder needs no entry here.
LAYERS: dict[str, set[str]] = {
    # the data model, every exception, config, package info, redaction, schema, OTel names
    "core": {"_core"},
    # structured replies: parsing, repairs, diagnosis, templates, corrections, grounding, formats
    "structure": {"_structure"},
    # what refinekit knows of each SDK's replies, errors and clients
    "providers": {"_providers"},
    # flows and drivers, jobs, budgets, events, policies, the evaluator protocol
    "engine": {"_engine"},
    # the public rule checks and evidence, on the evaluator protocol
    "evaluators": {"checks", "evidence"},
    "judges": {"judges"},
    "decorators": {"_decorators"},
    # OpenTelemetry spans, an instrument of the engine: it learns what a command is from the
    # command, and nothing below knows it
    "otel": {"otel"},
    # refinekit.local, and the server process it starts (refinekit/_local/)
    "local": {"local", "_local"},
    # the evaluation workflow, refinekit/eval/: golden files, runner, store, stats,
    # calibration, reports
    "eval": {"eval"},
    # the pytest plugin reads golden files and gates on a Wilson bound: it sits above eval
    "testing": {"testing", "_refinekit_pytest_plugin"},
    # the command line, refinekit/cli/; the demo runs on the scripted server
    "cli": {"cli", "__main__"},
    "package": {"__init__"},
}
ORDER = list(LAYERS)

PUBLIC_MODULES = {"__init__", "__main__", "checks", "evidence", "local", "py"}
"""What the package root holds besides one folder per layer (`py` is `py.typed`)."""

DECORATORS = {"correct", "guard", "retry", "review", "tools"}
"""Each decorator's own module in `_decorators/`: none imports another (`revisers` is
`review`'s part, `retry_prompt` `retry`'s, each importable by any decorator)."""

WITHOUT_SDK = {"_core", "_structure", "_engine", "checks", "evidence", "_decorators"}
"""Folders and modules that never import a model SDK at import time (they wrap any SDK); so
do the modules of `_providers` but its clients' (`openai_client`, `anthropic_client`)."""

MODEL_SDKS = ("openai", "instructor", "anthropic", "litellm", "langchain_core", "langchain")
"""The SDKs whose replies refinekit reads; `openai` and `instructor` are its dependencies."""

OPTIONAL_SDKS = ("anthropic", "litellm", "langchain_core", "langchain")
"""SDKs refinekit reads but does not depend on: no refinekit module imports them when imported."""


def module_name(path: Path) -> str:
    if path == PLUGIN:
        return "_refinekit_pytest_plugin"
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":  # a package is named as its folder: refinekit.eval
        parts.pop()
    return ".".join(parts)


def layer_key(module: str) -> str:
    """The name a module's layer is found by: its first part below `refinekit` (its folder)."""
    if module == "_refinekit_pytest_plugin":
        return module
    parts = module.split(".")
    assert parts[0] == "refinekit", module
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(module: str) -> str:
    key = layer_key(module)
    for layer, members in LAYERS.items():
        if key in members:
            return layer
    pytest.fail(
        f"{module} is in no layer's folder: put it in one (refinekit/_core/, _engine/, ...) "
        "or, for a new public module or folder, give it a layer in tests/test_layers.py (and "
        "a paragraph in docs/architecture.md)"
    )


def sources() -> list[Path]:
    return [*sorted(PACKAGE.rglob("*.py")), PLUGIN]


def imports_of(path: Path) -> list[tuple[str, int, bool]]:
    """The modules a file imports: (absolute name, line, at module level outside functions).

    Imports at module level, inside functions and under `TYPE_CHECKING` alike.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []
    top_level = {id(node) for node in tree.body}
    top_level |= {
        id(child)
        for node in tree.body
        if isinstance(node, ast.Try)
        or (isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test))
        for child in ast.walk(node)
    }
    for node in ast.walk(tree):
        at_import = id(node) in top_level
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, at_import) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from . import checks`: a name may be a submodule (`refinekit_imports` keeps
            # only the names that are modules)
            found += [(f"{target}.{a.name}", node.lineno, at_import) for a in node.names]
            found.append((target, node.lineno, at_import))
    return found


def refinekit_imports(path: Path) -> list[tuple[str, int]]:
    return [
        (name, line)
        for name, line, _ in imports_of(path)
        if name.split(".")[0] == "refinekit" and _is_module(name)
    ]


def _is_module(name: str) -> bool:
    parts = name.split(".")
    candidate = ROOT.joinpath(*parts)
    return candidate.with_suffix(".py").exists() or (candidate / "__init__.py").exists()


@pytest.mark.parametrize("path", sources(), ids=lambda p: module_name(p))
def test_every_import_points_down(path: Path) -> None:
    module = module_name(path)
    own = ORDER.index(layer_of(module))
    for imported, line in refinekit_imports(path):
        if imported == "refinekit" or imported == module:
            continue
        target = layer_of(imported)
        assert ORDER.index(target) <= own, (
            f"{path.relative_to(ROOT)}:{line}: {module} ({ORDER[own]}) imports {imported} "
            f"({target}), a layer above it"
        )


@pytest.mark.parametrize("path", sources(), ids=lambda p: module_name(p))
def test_no_decorator_imports_another(path: Path) -> None:
    module = module_name(path)
    if layer_of(module) != "decorators":
        return
    own = module.rpartition(".")[2]
    for imported, line in refinekit_imports(path):
        if imported == "refinekit" or layer_of(imported) != "decorators":
            continue
        assert imported.rpartition(".")[2] not in DECORATORS - {own}, (
            f"{path.relative_to(ROOT)}:{line}: the decorator module {module} imports the "
            f"decorator module {imported}: shared code belongs in the engine"
        )


def test_judges_import_no_decorator() -> None:
    for path in sorted((PACKAGE / "judges").glob("*.py")):
        for imported, line in refinekit_imports(path):
            allowed = ("core", "structure", "providers", "engine", "evaluators", "judges")
            assert layer_of(imported) in allowed, (
                f"{path.relative_to(ROOT)}:{line}: a judge imports {imported}"
            )


def test_decorators_know_evaluators_only_through_the_protocol() -> None:
    for path in sources():
        if layer_of(module_name(path)) != "decorators":
            continue
        for imported, line in refinekit_imports(path):
            assert layer_of(imported) != "judges", (
                f"{path.relative_to(ROOT)}:{line}: a decorator imports the judge {imported}"
            )


def test_the_data_model_imports_nothing_of_refinekit() -> None:
    core = PACKAGE / "_core"
    assert refinekit_imports(core / "types.py") == []
    # the errors redact their messages: the redaction module is a leaf, as the types are
    assert refinekit_imports(core / "redact.py") == []
    # the internal signals are a leaf too (the errors re-export them)
    assert refinekit_imports(core / "signals.py") == []
    assert {name for name, _ in refinekit_imports(core / "errors.py")} == {
        "refinekit._core.types",
        "refinekit._core.redact",
        "refinekit._core.signals",
    }
    for path in sorted(core.glob("*.py")):  # the base imports nothing above itself
        for imported, line in refinekit_imports(path):
            assert imported.startswith("refinekit._core"), f"{path.name}:{line}: {imported}"


@pytest.mark.parametrize("path", sources(), ids=lambda p: module_name(p))
def test_the_engine_and_the_decorators_import_no_model_sdk(path: Path) -> None:
    module = module_name(path)
    providers_shape = layer_key(module) == "_providers" and not module.endswith("_client")
    if layer_key(module) not in WITHOUT_SDK and not providers_shape:
        return
    for imported, line, at_import in imports_of(path):
        if imported.split(".")[0] in MODEL_SDKS:
            assert not at_import, (
                f"{path.relative_to(ROOT)}:{line}: imports {imported} when imported itself; "
                "import it where a model is called (the default reviser does)"
            )


@pytest.mark.parametrize("path", sources(), ids=lambda p: module_name(p))
def test_only_the_tracer_imports_opentelemetry(path: Path) -> None:
    # refinekit.otel's switch imports the tracer (refinekit.otel._tracer) only inside instrument()
    for imported, line, at_import in imports_of(path):
        if imported.split(".")[0] == "opentelemetry" or imported == "refinekit.otel._tracer":
            where = f"{path.relative_to(ROOT)}:{line}: imports {imported}"
            assert module_name(path) in ("refinekit.otel._tracer", "refinekit.otel"), where
            assert module_name(path) == "refinekit.otel._tracer" or not at_import, where


@pytest.mark.parametrize("path", sources(), ids=lambda p: module_name(p))
def test_no_module_imports_an_optional_sdk_when_imported(path: Path) -> None:
    for imported, line, at_import in imports_of(path):
        if imported.split(".")[0] in OPTIONAL_SDKS:
            assert not at_import, (
                f"{path.relative_to(ROOT)}:{line}: imports {imported} when imported itself; "
                "refinekit does not depend on it: import it where it is used"
            )


def test_importing_the_judges_and_the_test_server_imports_no_optional_sdk() -> None:
    code = (
        "import sys, refinekit.judges, refinekit.testing, refinekit.eval\n"
        f"optional = {set(OPTIONAL_SDKS)!r}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in optional))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "[]"


def test_importing_refinekit_imports_no_model_sdk_and_no_test_server() -> None:
    code = (
        "import sys, refinekit, refinekit.checks, refinekit.evidence, refinekit.otel\n"
        "heavy = {'openai', 'instructor', 'anthropic', 'litellm', 'langchain_core',\n"
        "         'http', 'refinekit.testing', 'refinekit.judges', 'opentelemetry',\n"
        "         'refinekit.otel._tracer'}\n"
        "print(sorted(m for m in sys.modules if m in heavy or m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "[]"


def _module_imports(path: Path) -> set[str]:
    """The refinekit modules a file imports: at module level, in a function, for typing.

    Those under `if TYPE_CHECKING:` too: a cycle closed only for the type checker is still
    two modules that need each other. `from package import name` imports `package.name` when
    that is a module, else `package` itself.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = {f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")}
            found |= subs if len(subs) == len(node.names) else subs | {target}
    return {name for name in found if name.startswith("refinekit") and _is_module(name)} - {module}


def test_no_import_closes_a_cycle() -> None:
    # module-level, function-level and `if TYPE_CHECKING:` imports alike: an import moved into
    # a function or under `TYPE_CHECKING` to dodge a cycle is still the cycle (modules that
    # need each other's names are one module, or share a lower one)
    graph = {module_name(path): _module_imports(path) for path in sources()}
    cycles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert cycles == [], f"import cycles: {cycles}"


def test_the_package_root_holds_the_public_modules_and_one_folder_per_layer() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    files = {p.name.partition(".")[0] for p in PACKAGE.iterdir() if p.is_file()}
    layered = {key for members in LAYERS.values() for key in members}
    assert folders <= layered, folders - layered
    assert files <= PUBLIC_MODULES | {"otel"}, files - PUBLIC_MODULES
    assert all(not name.startswith("_") or name in ("__init__", "__main__") for name in files)


def test_no_module_is_over_600_lines() -> None:
    # a module a reader can hold: split a longer one by what its parts do
    long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert long == {}, f"modules over 600 lines: {long}"


def test_only_the_ledger_touches_a_jobs_accounts() -> None:
    # A job's counters have one owner: everything else calls `_engine/ledger`'s functions
    # (mark, count, add_usage, take_correction, ...) and reads the public properties. `_lock`
    # is a common name: it counts when read off something called a job.
    from refinekit._engine.ledger import Ledger

    private = {name for name in Ledger.__slots__ if name.startswith("_")}

    def of_a_job(node: ast.Attribute) -> bool:
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            return False  # another class's own attribute of the same name
        if node.attr != "_lock":
            return True
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        return "job" in name.lower()

    touched = [
        f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}"
        for path in sources()
        if path != PACKAGE / "_engine" / "ledger.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in private and of_a_job(node)
    ]
    assert touched == [], f"a job's private accounts read or changed outside the ledger: {touched}"

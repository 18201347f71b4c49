"""The package's layers, checked: every import in refinekit points down (docs/architecture.md).

Each module is read with `ast` (imports at module level, inside functions and under
`TYPE_CHECKING` alike), and each refinekit module it imports must sit in its own layer or one
below. A new module must be given a layer here: the test says so when one has none.
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

# lowest first; a module may import its own layer and those below it
LAYERS: dict[str, set[str]] = {
    "base": {
        "_config",
        "_errtext",
        "_jsonload",
        "_numbers",
        "_otel_names",
        "_package",
        "_redact",
        "_schema",
    },
    "data": {"_model", "_errors"},
    # structured replies: templates, repairs, what a failed reply did wrong, server formats
    "structure": {
        "_corrections",
        "_diagnose",
        "_formats",
        "_grounding",
        "_parse",
        "_repair",
        "_template",
    },
    "engine": {
        "_bridge",
        "_budget",
        "_prices",
        "_reserve",
        "_decorate",
        "_flow",
        "_hooks",
        "_anthropic",
        "_job",
        "_openai",
        "_outcome",
        "_policy",
        "_prompts",
        "_recorder",
        "_replies",
        "_request",
    },
    "evaluators": {"_evaluators", "checks", "evidence"},
    "judges": {"judges"},
    "decorators": {
        "_correct",
        "_guard",
        "_retry",
        "_retry_prompt",
        "_review",
        "_revisers",
        "_tools",
    },
    # OpenTelemetry spans from the engine's tracing hooks: it knows the decorators' and the
    # judges' commands, and none of them knows it
    "otel": {"_otel", "otel"},
    "local": {"local"},
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

DECORATORS = {"_correct", "_guard", "_retry", "_review", "_tools"}
"""Each decorator's own module: none imports another (`_revisers` is `_review`'s part)."""

ENGINE_WITHOUT_SDK = LAYERS["base"] | LAYERS["data"] | LAYERS["engine"] | LAYERS["evaluators"]
ENGINE_WITHOUT_SDK |= LAYERS["decorators"]
ENGINE_WITHOUT_SDK -= {"_anthropic", "_openai"}
"""Modules that never import a model SDK at import time (they wrap any SDK)."""

MODEL_SDKS = ("openai", "instructor", "anthropic", "litellm", "langchain_core", "langchain")
"""The SDKs whose replies refinekit reads; `openai` and `instructor` are its dependencies."""

OPTIONAL_SDKS = ("anthropic", "litellm", "langchain_core", "langchain")
"""SDKs refinekit reads but does not depend on: no refinekit module imports them when imported."""


def module_name(path: Path) -> str:
    if path == PLUGIN:
        return "_refinekit_pytest_plugin"
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts)


def layer_key(module: str) -> str:
    """The name a module is listed under in LAYERS: its first part below `refinekit`."""
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
        f"{module} has no layer in tests/test_layers.py: give it one (and a line in "
        "docs/architecture.md)"
    )


def sources() -> list[Path]:
    return [*sorted(PACKAGE.rglob("*.py")), PLUGIN]


def imports_of(path: Path) -> list[tuple[str, int, bool]]:
    """The modules a file imports: (absolute name, line, at module level outside functions)."""
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
    for imported, line in refinekit_imports(path):
        key = layer_key(imported) if imported != "refinekit" else ""
        assert key not in DECORATORS - {layer_key(module)}, (
            f"{path.relative_to(ROOT)}:{line}: the decorator module {module} imports the "
            f"decorator module {imported}: shared code belongs in the engine"
        )


def test_judges_import_no_decorator() -> None:
    for path in sorted((PACKAGE / "judges").glob("*.py")):
        for imported, line in refinekit_imports(path):
            assert layer_of(imported) in ("base", "data", "engine", "evaluators", "judges"), (
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
    assert refinekit_imports(PACKAGE / "_model.py") == []
    assert {name for name, _ in refinekit_imports(PACKAGE / "_errors.py")} == {
        "refinekit._core.types"
    }


@pytest.mark.parametrize("path", sources(), ids=lambda p: module_name(p))
def test_the_engine_and_the_decorators_import_no_model_sdk(path: Path) -> None:
    if layer_key(module_name(path)) not in ENGINE_WITHOUT_SDK:
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
        "heavy = {'openai', 'instructor', 'anthropic', 'litellm', 'langchain_core', 'http',\n"
        "         'refinekit.testing', 'refinekit.judges', 'opentelemetry', 'refinekit.otel._tracer'}\n"
        "print(sorted(m for m in sys.modules if m in heavy or m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "[]"

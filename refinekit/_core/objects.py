"""Objects named on the command line: `package.module:name`, or `path/to/file.py:name`.

The command line names an answer function, a judge, a prices object or a script this way;
the current folder is importable, and a file path is taken as the module it is.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from .errors import UsageProblem

__all__ = ["load_object", "module_form"]


def module_form(spec: str, what: str) -> str:
    """`spec`, with a file path before its colon turned into the module the file is.

    `app/answers.py:answer` (or `app/answers:answer`) is `app.answers:answer`: the file's
    path relative to the folder it is imported from, which is the deepest folder holding it
    among the current folder and `sys.path`. A spec without a path is returned as it is.

    Raises:
        UsageProblem: No such file, or it is in no folder Python imports from.
    """
    module, sep, attribute = spec.rpartition(":")
    if not sep or not (module.endswith(".py") or "/" in module or os.sep in module):
        return spec
    path = Path(module if module.endswith(".py") else module + ".py")
    if not path.is_file():
        raise UsageProblem(
            f"{what} {spec!r}: no file {str(path)!r}; give a file that exists, or the module "
            f"form, package.module:{attribute or 'name'}"
        )
    path = path.resolve()
    best: tuple[str, ...] | None = None
    for entry in [str(Path.cwd()), *sys.path]:
        root = Path(entry or ".").resolve()
        try:
            parts = path.relative_to(root).with_suffix("").parts
        except ValueError:
            continue
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        usable = bool(parts) and all(p.isidentifier() for p in parts)
        if usable and (best is None or len(parts) < len(best)):
            best = parts
    if best is None:
        raise UsageProblem(
            f"{what} {spec!r}: {str(path)!r} is not inside the current folder or a folder "
            "Python imports from (or its path is not a module name); run from the folder that "
            f"holds its package and give package.module:{attribute or 'name'}"
        )
    return ".".join(best) + ":" + attribute


def load_object(spec: str, what: str) -> Any:
    """The object a `package.module:attribute` names (the current folder is importable).

    A file path before the colon (`app/answers.py:answer`) is taken as its module form (see
    `module_form`).

    Raises:
        UsageProblem: The spec is malformed, the module cannot be imported or lacks the name.
    """
    spec = module_form(spec, what)
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageProblem(
            f"{what} must look like package.module:name (e.g. myapp.answers:answer), got {spec!r}"
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name):
            raise UsageProblem(
                f"{what} {spec!r}: no module named {e.name!r} (run from the folder it is "
                "importable from, or install its package)"
            ) from None
        raise UsageProblem(f"{what} {spec!r}: importing {module_name!r} failed: {e}") from e
    except Exception as e:
        raise UsageProblem(
            f"{what} {spec!r}: importing {module_name!r} raised {type(e).__name__}: {e}"
        ) from e
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageProblem(f"{what} {spec!r}: {module_name!r} has no {attribute!r}") from None
    return obj

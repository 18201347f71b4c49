"""Which real endpoint the demo runs against, from its options and the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..._core.errors import DemoConfigError
from ..._core.redact import safe_url

__all__ = ["Endpoint", "endpoint_from_options"]


@dataclass(frozen=True)
class Endpoint:
    """A real OpenAI-compatible endpoint to run the demo against.

    Attributes:
        base_url: The API's base URL, e.g. `http://localhost:11434/v1`.
        model: The answering model's name.
        judge_model: The judge model's name.
        api_key: The key sent (never shown): `OPENAI_API_KEY`, else "not-needed".
        key_from_env: Whether `api_key` came from `OPENAI_API_KEY`.
    """

    base_url: str
    model: str
    judge_model: str
    api_key: str = field(default="not-needed", repr=False)
    key_from_env: bool = False


def endpoint_from_options(
    base_url: str | None,
    model: str | None,
    judge_model: str | None,
    environ: Mapping[str, str],
) -> Endpoint | None:
    """The endpoint the options name, or None to run on the scripted server.

    Args:
        base_url: `--base-url`; `OPENAI_BASE_URL` when not given.
        model: `--model`.
        judge_model: `--judge-model`.
        environ: The environment (`OPENAI_BASE_URL`, `OPENAI_API_KEY`).

    Returns:
        The endpoint, or None when none of the three is given.

    Raises:
        DemoConfigError: Only some of the three are given, or the base URL is not http(s).
    """
    env_url = environ.get("OPENAI_BASE_URL") or None
    url = base_url or env_url
    given = {"--base-url": url, "--model": model, "--judge-model": judge_model}
    if not any(given.values()):
        return None
    missing = [name for name, value in given.items() if not value]
    if missing:
        message = (
            "a real endpoint needs --base-url (or OPENAI_BASE_URL), --model and --judge-model; "
            f"missing: {', '.join(missing)}."
        )
        if env_url and not base_url:
            message += " (OPENAI_BASE_URL is set: unset it to run the scripted demo.)"
        message += " The API key, if the endpoint needs one, is read from OPENAI_API_KEY."
        raise DemoConfigError(message)
    assert url is not None
    assert model is not None
    assert judge_model is not None
    if not url.startswith(("http://", "https://")):
        raise DemoConfigError(
            f"--base-url must be an http:// or https:// URL, got {safe_url(url)!r} "
            "(e.g. http://localhost:11434/v1)"
        )
    key = environ.get("OPENAI_API_KEY") or None
    return Endpoint(url, model, judge_model, key or "not-needed", key is not None)

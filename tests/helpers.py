"""Builders shared by the test modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openai.types.chat import ChatCompletion


def completion(text: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> ChatCompletion:
    """A `ChatCompletion` with one text choice and the given token usage."""
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "stand-in",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def answering(mode: str, answer: str = "an answer") -> tuple[list[str], Callable[..., Any]]:
    """A function to decorate (`def` or `async def` by mode) and the questions it was asked."""
    calls: list[str] = []
    if mode == "sync":

        def respond(question: str) -> str:
            calls.append(question)
            return answer

        return calls, respond

    async def arespond(question: str) -> str:
        calls.append(question)
        return answer

    return calls, arespond

"""`needs=placeholders`: the app the docs' examples are written for, as small as it can be.

The examples call `retrieve`, `build_prompt` and `call_model` as "your retrieval, your prompt,
your model". Here retrieval finds the refund policy, and the model is a canned one: it replies
what the page's hidden setup scripted (`call_model.script(...)`), in order, then an answer that
cites the policy. Each page gets fresh ones.
"""

from __future__ import annotations

from typing import Any

from refinekit import ContextDocument

REFUNDS = ContextDocument(
    text="Refunds are accepted within 30 days of delivery.", source="policies/refunds.md"
)
ANSWER = "Refunds are accepted within 30 days (policies/refunds.md)."


class CannedModel:
    """A stand-in for the app's model call: scripted replies first, then `ANSWER`."""

    def __init__(self) -> None:
        self.replies: list[Any] = []
        self.prompts: list[Any] = []

    def script(self, *replies: Any) -> None:
        self.replies.extend(replies)

    def __call__(self, prompt: Any) -> Any:
        self.prompts.append(prompt)
        return self.replies.pop(0) if self.replies else ANSWER


def placeholders() -> dict[str, Any]:
    """Fresh placeholders for one page."""
    call_model = CannedModel()

    def retrieve(question: str) -> list[ContextDocument]:
        return [REFUNDS]

    def build_prompt(question: str, docs: list[ContextDocument]) -> str:
        sources = "\n".join(f"[{d.source}] {d.text}" for d in docs)
        return f"Answer from these documents, citing the source.\n{sources}\n\nQ: {question}"

    def ask_model(client: Any, question: str) -> Any:
        return call_model(question)

    return {
        "retrieve": retrieve,
        "build_prompt": build_prompt,
        "call_model": call_model,
        "ask_model": ask_model,
    }

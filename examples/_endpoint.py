"""Shared by the judge examples: a real endpoint when configured, else a scripted server.

Not an example itself: the judge examples import it so each can focus on its judge.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import Any

import openai

from refinekit import judges
from refinekit.testing import ScriptedOpenAI


def judge_model(stack: ExitStack, scripted: list[Any], **settings: Any) -> judges.JudgeModel:
    """The real endpoint when configured, else a scripted server answering `scripted`.

    `settings` are the `JudgeModel`'s (`cache=`, `temperature=`, ...).
    """
    model = os.environ.get("REFINEKIT_JUDGE_MODEL")
    if os.environ.get("OPENAI_BASE_URL") and model:  # the client reads OPENAI_BASE_URL itself
        print(f"real endpoint (OPENAI_BASE_URL), judge model {model!r}")
        client = openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "not-needed"))
        return judges.JudgeModel(stack.enter_context(client), model, **settings)
    server = stack.enter_context(ScriptedOpenAI())
    server.script("judge", scripted)
    print("scripted: a ScriptedOpenAI server on 127.0.0.1 plays the judge; its replies are")
    print("scripted, so this shows the wiring, not a model's quality")
    return judges.JudgeModel(stack.enter_context(server.client()), "judge", **settings)

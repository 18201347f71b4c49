"""The bridge between sync code, worker threads and event loops, seen through the decorators."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading

import refinekit
from refinekit import EvaluationRequest, retry_on_low_quality


async def answer(question: str) -> str:
    return f"an answer to {question}"


async def test_sync_evaluators_on_the_async_path_run_at_once_without_a_cap() -> None:
    # an event loop's default executor has min(32, CPUs + 4) threads: 40 evaluators that
    # each wait for all the others would never all start there
    callers = 40
    everyone = threading.Barrier(callers, timeout=10)
    threads: set[str] = set()

    def evaluator(request: EvaluationRequest) -> bool:
        threads.add(threading.current_thread().name)
        everyone.wait()
        return True

    fn = retry_on_low_quality(evaluator=evaluator)(answer)
    results = await asyncio.gather(*(fn(f"q{i}") for i in range(callers)))
    assert results == [f"an answer to q{i}" for i in range(callers)]
    assert threading.current_thread().name not in threads  # never on the event loop


async def test_a_sync_evaluator_sees_the_callers_job() -> None:
    seen: list[refinekit.Job | None] = []

    def evaluator(request: EvaluationRequest) -> bool:
        seen.append(refinekit.current_job())
        return True

    async with refinekit.job() as job:
        await retry_on_low_quality(evaluator=evaluator)(answer)("q")
    assert seen == [job]


def test_an_abandoned_sync_judge_does_not_hold_up_the_program() -> None:
    # @reviewed stops waiting for a judge at judge_timeout; the judge's thread may still be
    # blocked (here: forever), and the program must still end when its work is done
    program = textwrap.dedent(
        """
        import asyncio, threading
        import refinekit

        never = threading.Event()

        def stuck_judge(request):
            never.wait()
            return True

        @refinekit.reviewed(judge=stuck_judge, mode="shadow", judge_timeout=0.1)
        async def answer(question):
            return "the draft"

        print(asyncio.run(answer("q")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the draft"

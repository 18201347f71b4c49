"""Subscribe to refinekit's events. Offline. Run: python examples/hooks_example.py"""

from __future__ import annotations

import logging

import refinekit
from refinekit import checks, retry_on_low_quality

answers = iter(["", "Paris."])


@retry_on_low_quality(evaluator=checks.not_empty(), wait=0.01)
def capital(question: str) -> str:
    return next(answers)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    seen: list[str] = []
    with refinekit.subscribe(lambda event: seen.append(f"{event.kind} {event.attempt}")):
        print("caller got:", capital("What is the capital of France?"))
    print("events:", ", ".join(seen))


if __name__ == "__main__":
    main()

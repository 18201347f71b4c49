"""OpenTelemetry spans of a retried answer and its judge. Offline: the judge is scripted.

Needs `pip install "refinekit[otel]" opentelemetry-sdk`. Run: python examples/tracing_example.py

The judge model answers from refinekit.testing.ScriptedOpenAI, a real OpenAI-compatible HTTP
server on 127.0.0.1 (first "No", then "Yes"), so the spans carry the token counts of real
replies. The spans go to the SDK's in-memory exporter and are printed as a tree; in an app,
give the tracer provider an OTLP exporter instead (docs/tracing.md).
"""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import refinekit.otel
from refinekit import record_context, retry_on_low_quality
from refinekit.judges import JudgeModel, relevancy
from refinekit.testing import Reply, ScriptedOpenAI, set_testing

SHOWN = (
    "refinekit.attempt.number",
    "refinekit.attempts",
    "refinekit.judge.usage.input_tokens",
    "gen_ai.operation.name",
    "gen_ai.request.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
)


def print_tree(spans: list[ReadableSpan], parent: int | None = None, depth: int = 0) -> None:
    children = [s for s in spans if (s.parent.span_id if s.parent else None) == parent]
    for span in sorted(children, key=lambda s: s.start_time or 0):
        attributes = {k: v for k, v in (span.attributes or {}).items() if k in SHOWN}
        print(f"{'  ' * depth}{span.name}  {attributes if attributes else ''}".rstrip())
        for event in span.events:
            facts = dict(event.attributes or {})
            label = facts.get("gen_ai.evaluation.score.label", "")
            print(f"{'  ' * depth}  * event {event.name} {label}".rstrip())
        print_tree(spans, span.context.span_id, depth + 1)


def answer(question: str, feedback: str | None = None) -> str:
    record_context("Refunds are issued within 14 days of the return.")
    return "Within 14 days." if feedback else "Our shop opens at nine."


def main() -> None:
    set_testing()  # no real waiting between attempts
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    refinekit.otel.instrument(tracer_provider=provider)  # or no argument: the global provider

    with ScriptedOpenAI() as server, server.client() as client:
        server.script(
            "judge",
            [
                Reply.text("No.", prompt_tokens=42, completion_tokens=1),
                Reply.text("Yes.", prompt_tokens=57, completion_tokens=1),
            ],
        )
        judged = retry_on_low_quality(evaluator=relevancy(JudgeModel(client, "judge")))(answer)
        tracer = provider.get_tracer("shop")
        with tracer.start_as_current_span("POST /ask"):
            print("offline, scripted judge; caller got:", judged("How long do refunds take?"))

    refinekit.otel.uninstrument()
    print_tree(list(exporter.get_finished_spans()))
    provider.shutdown()


if __name__ == "__main__":
    main()

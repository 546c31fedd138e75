"""`comminsight metrics` and `comminsight openapi`: the agent's Prometheus exposition and its
API description.

metrics: the exposition as /metrics serves it (table format, for a quick look or a pipe into
a Prometheus tool), a sample a line (plain: name, labels, value), or a list of samples (json;
a value that is not a finite number is the exposition's text for it, "NaN", "+Inf", "-Inf",
as JSON has no such numbers). openapi: the operations, a row each (table, plain), or the
OpenAPI document itself (json).
"""

from __future__ import annotations

import math

from rich.markup import escape

from comminsight.cli.client import NOT_AN_ANSWER_HINT, AgentUnavailable, answer, printable
from comminsight.cli.output import Output, new_table
from comminsight_client import Client
from comminsight_client.api.meta import get_metrics, get_openapi_document

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


def metrics_cmd(client: Client, args, out: Output) -> None:
    text = answer(get_metrics, client=client)
    if out.format == "table":
        if args.grep:
            text = "".join(
                line + "\n" for line in text.splitlines() if args.grep in line.split("{")[0]
            )
        out.text(text)
        return
    samples = [s for s in metric_samples(text) if not args.grep or args.grep in s["name"]]
    if out.json:
        out.json_value(samples)
        return
    table = new_table(None, ("name", "labels", "value"))
    for s in samples:
        labels = ",".join(f'{k}="{v}"' for k, v in s["labels"].items())
        table.add_row(escape(s["name"]), escape(labels), str(s["value"]))
    out.table(table)


def metric_samples(text: str) -> list[dict]:
    """Every sample of a Prometheus text exposition: {"name", "labels", "value"}."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [
            {"name": s.name, "labels": dict(s.labels), "value": json_number(s.value)}
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except ValueError as e:
        raise AgentUnavailable(
            f"the agent's /metrics is not Prometheus text: {printable(str(e))}",
            NOT_AN_ANSWER_HINT,
        ) from None


def json_number(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def openapi_cmd(client: Client, args, out: Output) -> None:
    document = answer(get_openapi_document, client=client).to_dict()
    if out.json:
        out.json_value(document)
        return
    info = document.get("info", {})
    title = f"{info.get('title', 'API')} {info.get('version', '')}"
    table = new_table(
        f"{title} (OpenAPI {document.get('openapi', '?')})",
        ("method", "path", "operation", "summary"),
    )
    for path, item in document.get("paths", {}).items():
        for method, op in item.items():
            if method in HTTP_METHODS and isinstance(op, dict):
                table.add_row(
                    method.upper(),
                    escape(path),
                    escape(str(op.get("operationId", "-"))),
                    escape(str(op.get("summary", "-"))),
                )
    out.table(table)

"""`comminsight metrics` and `comminsight openapi`: the agent's Prometheus exposition and its
API description, as the agent serves them (for a quick look or a pipe into a tool)."""

from __future__ import annotations

from comminsight.cli.client import answer
from comminsight.cli.output import Output
from comminsight_client import Client
from comminsight_client.api.meta import get_metrics, get_openapi_document


def metrics_cmd(client: Client, args, out: Output) -> None:
    text = answer(get_metrics, client=client)
    if args.grep:
        text = "".join(line + "\n" for line in text.splitlines() if args.grep in line.split("{")[0])
    out.text(text)


def openapi_cmd(client: Client, args, out: Output) -> None:
    document = answer(get_openapi_document, client=client).to_dict()
    out.json_value(document)

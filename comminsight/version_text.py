"""`--version` of `comminsight` and `comminsight-agent`: the package version, the git commit
where the source tree has one, and the versions of the protocols that decide whether two
builds interoperate (the same labels as the Agent's `comminsight_build_info` metric)."""

from __future__ import annotations

import argparse
import sys


def version_text(prog: str) -> str:
    from comminsight.build_identity import PROTOCOL_LABELS, UNKNOWN, build_labels

    labels = build_labels()
    commit = labels["git_commit"]
    head = f"{prog} {labels['version']}" + (f" (git {commit[:12]})" if commit != UNKNOWN else "")
    protocols = ", ".join(
        f"{protocol_id} v{labels[label].replace(',', ',v')}"
        for label, protocol_id in PROTOCOL_LABELS
    )
    return f"{head}\nprotocols: {protocols}"


class VersionAction(argparse.Action):
    """Like argparse's 'version' action, but the text (which reads .git) is only built when
    --version is given."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        kwargs.setdefault("help", "print the version and the protocol versions, then exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(version_text(parser.prog) + "\n")
        parser.exit(0)

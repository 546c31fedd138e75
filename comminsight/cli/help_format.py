"""How `comminsight` describes itself: each option's help ends with its default, each
command's help ends with examples, and both are laid out as written.

argparse only: the parser is built on every run (also for `--help` and for every press of TAB
under shell completion), so nothing heavy is imported here.
"""

from __future__ import annotations

import argparse
import textwrap

WIDTH = 78  # help text laid out by hand fits an 80-column terminal


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs keep their lines (examples stay one to a line), and an option
    whose help does not state its default gets '(default: VALUE)', '(default: off)' for a flag.

    A default of None, an empty list or argparse.SUPPRESS (a sub-command's option that keeps
    the value given before the sub-command) has no useful printed form: such an option states
    its default in its own words ("default: every rank")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or "default" in text:
            return text
        default = action.default
        if default is argparse.SUPPRESS or default is None or default == []:
            return text
        if action.nargs == 0 and default is False:  # a store_true flag
            return f"{text} (default: off)"
        return f"{text} (default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser laid out by HelpFormatter; its sub-command parsers are too (argparse
    makes sub-parsers of the parent's class)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def paragraph(text: str) -> str:
    """`text` wrapped to WIDTH, for a description or epilog laid out as written."""
    return textwrap.fill(text, WIDTH)


def examples(*lines: str) -> str:
    """An epilog: 'examples:' and the command lines given, indented."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)

"""cli.output in-process: where progress is drawn, how a sentence and a table are laid out in
each format, and that errors go to stderr."""

from __future__ import annotations

import io

from rich.console import Console

from comminsight.cli.output import Output, error, new_table, terminal_progress


def console(terminal: bool, width: int = 40) -> tuple[Console, io.StringIO]:
    text = io.StringIO()
    return Console(file=text, force_terminal=terminal, width=width), text


def test_progress_is_drawn_only_on_a_terminal():
    for terminal in (True, False):
        out, text = console(terminal)
        with terminal_progress(out) as progress:
            task = progress.add_task("uploading", total=3)
            progress.advance(task)
        assert ("uploading" in text.getvalue()) is terminal


def test_a_sentence_wraps_in_a_table_format_and_is_whole_in_plain():
    sentence = "rank 2 (node-a02, pid 7711) has not joined AllReduce #18607 on default_pg:0"
    out, text = console(False)
    Output(out, "table").line(sentence)
    assert all(len(line) <= 40 for line in text.getvalue().splitlines())
    assert " ".join(text.getvalue().split()) == sentence
    out, text = console(True)  # plain: no styles, no wrapping, also on a terminal
    Output(out, "plain").line(f"[bold]{sentence}[/bold]")
    assert text.getvalue() == sentence + "\n"


def test_a_long_cell_folds_to_the_width_and_is_whole_in_plain():
    value = "pipeline_parallel_stage_3_of_a_rather_long_model_replica_name:" + "x" * 40
    table = new_table("A title that is longer than the forty columns", ("rank", "name"))
    table.add_row("0", value)
    out, text = console(False)
    Output(out, "table").table(table)
    lines = text.getvalue().splitlines()
    assert all(len(line) <= 40 for line in lines) and "…" not in text.getvalue()
    pieces = [line.split("│")[2].strip() for line in lines if line.startswith("│")]
    assert "".join(pieces) == value
    table = new_table("A title", ("rank", "name"))
    table.add_row("0", value)
    out, text = console(False)
    Output(out, "plain").table(table)
    assert text.getvalue() == f"# A title\nrank\tname\n0\t{value}\n\n"


def test_an_error_goes_to_stderr(capsys):
    error("the agent at http://127.0.0.1:9 did not answer", "start one")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "comminsight: the agent at http://127.0.0.1:9 did not answer\n  hint: start one\n"
    )

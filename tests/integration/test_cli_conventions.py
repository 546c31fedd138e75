"""`comminsight` follows command-line conventions: every command takes --format table|plain|json
and honours it, every option says what it does and its default, every command's help shows an
example, table output fits COLUMNS (80 when unset) in a pipe without cutting a value, errors go
to stderr with an empty stdout and a non-zero exit, and the shell completes its commands."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import forked_python
import pytest
from cli_in_process import run_cli
from ports import free_port
from profiler_builds import builds
from rich_tables import table_rows

from comminsight.cli.command_line import build_parser
from comminsight.cli.options import FORMATS
from comminsight.version_text import VersionAction

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("COMMINSIGHT_", "_ARGCOMPLETE"))
    }
    for name in ("COLUMNS", "COMP_LINE", "COMP_POINT"):
        env.pop(name, None)
    return {**env, **extra}


def cli(*args: str, env: dict | None = None, process: bool = False) -> subprocess.CompletedProcess:
    """`comminsight ARGS` with stdout and stderr piped (not a terminal): run in this process
    (what a command prints where, and its exit status, come from the same code either way,
    without an interpreter and the CLI's imports to start each time), or with process=True
    in a process of its own, for what only a process shows: its file descriptors 1 and 2
    and the status it exits with."""
    if not process:
        return run_cli(args, env or clean_env(), cwd=ROOT)
    return forked_python.run(
        [sys.executable, "-m", "comminsight.cli", *args],
        capture_output=True,
        text=True,
        env=env or clean_env(),
        cwd=ROOT,
        timeout=TIMEOUT_S,
    )


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


# ---- the parser tree ---------------------------------------------------------------------


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) of every command and sub-command, once each (aliases skipped)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                yield (*path, name), sub
                yield from commands(sub, (*path, name))


def subcommand_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    """name -> the help a parser lists for each of its sub-commands."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                out[choice.dest] = choice.help
    return out


ALL = list(commands(build_parser()))


def test_the_tree_has_every_command():
    names = {" ".join(path) for path, _ in ALL}
    assert {"protocols", "config", "demo", "sim", "trace", "steps", "status", "hangs resolve"} <= (
        names
    )
    assert "archive flush" in names and "ops inflight" in names


@pytest.mark.parametrize("path,parser", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_command_takes_every_format(path, parser):
    options = {o: a for a in parser._actions for o in a.option_strings}
    assert "--format" in options, f"comminsight {' '.join(path)} has no --format"
    assert tuple(options["--format"].choices) == FORMATS
    assert "--json" in options  # the alias scripts already use
    args = parser.parse_args([*required_arguments(parser), "--format", "json"])
    assert args.format == "json"


def required_arguments(parser: argparse.ArgumentParser) -> list[str]:
    """Values for the positional and required arguments of `parser`, so that it parses."""
    out = []
    for a in parser._actions:
        if not a.option_strings and a.nargs not in ("?", "*", argparse.PARSER, argparse.REMAINDER):
            out.append("x")
        elif a.option_strings and a.required:
            out += [a.option_strings[0], "x"]
    return out


@pytest.mark.parametrize("path,parser", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_option_says_what_it_does_and_its_default(path, parser):
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction, VersionAction)):
            continue
        name = f"comminsight {' '.join(path)}: {'/'.join(action.option_strings) or action.dest}"
        assert action.help and action.help.strip(), f"{name} has no help"
        if action.option_strings and not action.required:
            # as --help shows it: the formatter's '(default: X)', or the help's own words
            # (a sub-command's option keeps its parent's value: its default is SUPPRESS)
            assert "default" in formatter._expand_help(action), f"{name} says no default"


@pytest.mark.parametrize("path,parser", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_command_help_shows_an_example(path, parser):
    epilog = parser.epilog or ""
    assert "examples:" in epilog, f"comminsight {' '.join(path)}"
    lines = [line.strip() for line in epilog.split("examples:", 1)[1].splitlines()]
    command = "comminsight " + " ".join(path)
    assert any(command in line for line in lines), f"no example of `{command}`"
    # laid out as written: the help keeps the example on a line of its own
    text = parser.format_help()
    assert any(line.strip().startswith(command) for line in text.splitlines())


@pytest.mark.parametrize("path,parser", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_command_help_fits_80_columns(path, parser, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps option help to it; the rest is ours
    for line in parser.format_help().splitlines():
        assert len(line) <= 80, f"comminsight {' '.join(path)} --help: {line!r}"


def test_every_listed_command_has_help():
    parser = build_parser()
    for name, text in subcommand_help(parser).items():
        assert text and text.strip(), name
    for path, sub in ALL:
        for name, text in subcommand_help(sub).items():
            assert text and text.strip(), (path, name)


def test_the_top_help_says_how_to_complete_and_how_to_get_whole_values():
    out = cli("--help", process=True)
    assert out.returncode == 0, out.stderr
    assert 'eval "$(register-python-argcomplete comminsight)"' in out.stdout
    assert "--format plain" in out.stdout and "--format json" in out.stdout


# ---- output of local commands ------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    """`comminsight sim --format json` with the real plugin: its summary and its logs."""
    home = tmp_path_factory.mktemp("cli-conventions")
    plugin = builds()["plain"].path
    out = cli(
        "sim",
        "--plugin",
        str(plugin),
        "--home",
        str(home),
        "--workload",
        "tp-pp-dp",
        "--ranks",
        "4",
        "--steps",
        "2",
        "--time-scale",
        "0.02",
        "--env",
        "COMMINSIGHT_AGENT_AUTOSTART=0",
        "--format",
        "json",
        process=True,  # the summary on stdout of a real process, its ranks' output elsewhere
    )
    assert out.returncode == 0, out.stderr + out.stdout
    return json.loads(out.stdout), home, plugin


def sim_args(sim_run) -> list[str]:
    _, home, plugin = sim_run
    return [
        "sim",
        "--plugin",
        str(plugin),
        "--home",
        str(home / "again"),
        "--ranks",
        "2",
        "--steps",
        "1",
        "--time-scale",
        "0.02",
        "--env",
        "COMMINSIGHT_AGENT_AUTOSTART=0",
    ]


def test_json_of_every_local_command_is_one_document(sim_run, tmp_path):
    summary, home, _ = sim_run
    assert summary["status"] == "completed" and summary["ops"]["completed"] > 0
    logs = home / "inspector_logs"
    protocols = json.loads(cli("protocols", "--format", "json").stdout)
    assert {"id", "version", "kind", "status"} <= set(protocols[0])
    config = json.loads(
        cli("config", "--json", env=clean_env(COMMINSIGHT_HOME=str(tmp_path))).stdout
    )
    assert config["COMMINSIGHT_HOME"]["value"] == str(tmp_path)
    steps = cli("steps", str(logs), "--out", str(tmp_path / "steps"), "--format", "json")
    assert steps.returncode == 0, steps.stderr
    body = json.loads(steps.stdout)
    assert body["total"] == len(body["items"]) > 0
    assert {s["global_rank"] for s in body["items"]} == {0, 1, 2, 3}
    trace = cli("trace", str(logs), "-o", str(tmp_path / "trace.json"), "--format", "json")
    assert trace.returncode == 0, trace.stderr
    written = json.loads(trace.stdout)
    assert written["trace"] == str(tmp_path / "trace.json") and written["ranks"] == 4
    json.loads((tmp_path / "trace.json").read_text())  # and the trace itself


def test_plain_is_honoured_by_offline_steps(sim_run, tmp_path):
    _, home, _ = sim_run
    out = cli("steps", str(home / "inspector_logs"), "--out", str(tmp_path), "--format", "plain")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = (
        "step\tstart (UTC)\tduration ms\tperiod ms\tops\tMiB\tbusbw GB/s\tconfidence\tanomalies"
    )
    assert lines.count(header) == 4  # a table per rank
    rows = [line.split("\t") for line in lines if line[:1].isdigit() and "\t" in line]
    assert rows and all(len(r) == 9 for r in rows)
    assert "┃" not in out.stdout and "│" not in out.stdout


@pytest.mark.parametrize("columns", [None, 120])
def test_piped_tables_fit_columns_and_cut_nothing(sim_run, tmp_path, columns):
    _, home, _ = sim_run
    logs = str(home / "inspector_logs")
    width = columns or 80
    env = clean_env(**({"COLUMNS": str(columns)} if columns else {}))
    runs = {
        # COLUMNS unset: the width of a real process's pipe
        "protocols": cli("protocols", env=env, process=columns is None),
        "config": cli("config", env={**env, "COMMINSIGHT_HOME": str(tmp_path / ("a" * 90))}),
        "steps": cli("steps", logs, "--out", str(tmp_path / "steps"), env=env),
        "trace": cli("trace", logs, "-o", str(tmp_path / "trace.json"), env=env),
        "sim": cli(*sim_args(sim_run), env=env),
    }
    for name, out in runs.items():
        assert out.returncode == 0, (name, out.stderr)
        assert widest(out.stdout) <= width, (name, out.stdout)
        assert "…" not in out.stdout, name


def test_a_long_value_folds_in_a_table_and_is_whole_in_plain(tmp_path):
    home = str(tmp_path / ("a-rather-long-directory-name-" * 4))
    table = cli("config", env=clean_env(COMMINSIGHT_HOME=home))
    assert table.returncode == 0, table.stderr
    assert widest(table.stdout) <= 80 and "…" not in table.stdout
    # the folded pieces of the row's value cell, in order, are the whole value
    (row,) = [r for r in table_rows(table.stdout) if r[0] == "COMMINSIGHT_HOME"]
    assert row[1] == repr(home)
    plain = cli("config", "--format", "plain", env=clean_env(COMMINSIGHT_HOME=home))
    assert f"COMMINSIGHT_HOME\t{home!r}\t" in plain.stdout


def test_sim_json_alias_and_plain(sim_run):
    alias = cli(*sim_args(sim_run), "--json")
    assert alias.returncode == 0, alias.stderr
    assert json.loads(alias.stdout)["status"] == "completed"
    plain = cli(*sim_args(sim_run), "--format", "plain")
    assert plain.returncode == 0, plain.stderr
    assert "rank\tpid\tstatus\tops issued/planned\tcompleted\tsteps" in plain.stdout


# ---- errors ------------------------------------------------------------------------------


def refused(out: subprocess.CompletedProcess, status: int, says: str) -> None:
    assert out.returncode == status, out.stdout + out.stderr
    assert out.stdout == "", out.stdout
    assert says in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_errors_go_to_stderr_with_nothing_on_stdout(tmp_path, fmt):
    f = ("--format", fmt)
    bad_mode = clean_env(COMMINSIGHT_HOME=str(tmp_path), COMMINSIGHT_AGENT_MODE="boss")
    # real processes for one refusal of the configuration (2) and one of the work (1)
    refused(cli("config", *f, env=bad_mode, process=True), 2, "COMMINSIGHT_AGENT_MODE")
    home = ("--home", str(tmp_path))
    refused(cli("sim", *home, "--workload", "tp-pp-dp", "--ranks", "6", *f), 2, "tp*pp")
    refused(cli("sim", *home, "--plugin", str(tmp_path / "no.so"), *f), 2, "does not exist")
    refused(cli("sim", *f), 2, "--home is required")
    url = f"http://127.0.0.1:{free_port()}"
    refused(cli("status", "--url", url, *f, process=True), 1, f"cannot reach the agent at {url}")
    refused(cli("hangs", "show", "x", "--url", url, *f), 1, "hint:")
    refused(cli("steps", str(tmp_path / "none"), *f), 1, "no inspector_logs segments")
    refused(cli("steps", str(tmp_path), "--rank", "1", *f), 2, "--rank asks the agent")
    refused(cli("steps", "--out", str(tmp_path), *f), 2, "--out applies to a directory")
    refused(cli("ops", "--limit", "many", *f), 2, "argument --limit")
    refused(cli("no-such-command", *f), 2, "invalid choice")


# ---- shell completion --------------------------------------------------------------------


def completions(line: str, tmp_path: Path, module: str = "comminsight.cli") -> set[str]:
    """What argcomplete answers a shell completing `line` (its protocol: _ARGCOMPLETE,
    COMP_LINE, COMP_POINT; the answer in the file _ARGCOMPLETE_STDOUT_FILENAME names)."""
    answer = tmp_path / "completions"
    out = subprocess.run(
        [sys.executable, "-m", module],
        capture_output=True,
        text=True,
        env=clean_env(
            _ARGCOMPLETE="1",
            _ARGCOMPLETE_IFS="\n",
            _ARGCOMPLETE_STDOUT_FILENAME=str(answer),
            COMP_LINE=line,
            COMP_POINT=str(len(line)),
        ),
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""  # nothing ran: the answer is all
    return {c.strip() for c in answer.read_text().split("\n") if c.strip()}


def test_the_shell_completes_commands_options_and_choices(tmp_path):
    assert completions("comminsight st", tmp_path) == {"status", "steps"}
    assert {"protocols", "config", "sim", "hangs", "incidents"} <= completions(
        "comminsight ", tmp_path
    )
    assert completions("comminsight hangs re", tmp_path) == {"resolve"}
    assert completions("comminsight steps --for", tmp_path) == {"--format"}
    assert completions("comminsight sim --format ", tmp_path) == set(FORMATS)
    assert completions("comminsight-agent --lo", tmp_path, "comminsight.agent.main") == {
        "--log-level"
    }


@pytest.mark.parametrize("script", ["comminsight", "comminsight-agent"])
def test_the_console_scripts_carry_the_completion_marker(script):
    """What argcomplete's global completion checks before it completes an installed script."""
    path = Path(sys.executable).parent / script
    if not path.exists():
        pytest.skip(f"{script} is not installed in this environment")
    out = subprocess.run(
        [sys.executable, "-m", "argcomplete._check_console_script", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr

"""The documentation runner (tests/doc_blocks.py) on small documents: what it reads of the
markdown, and that each way a documented command can go wrong fails, naming the file and
line. The documents' own run is tests/e2e/test_docs_commands.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from doc_blocks import DocumentError, extract_blocks, placeholders, run_document
from waiting import wait_until

FENCE = "```"


def doc(tmp_path: Path, text: str, name: str = "doc.md") -> Path:
    path = tmp_path / name
    path.write_text(text.replace("~~~", FENCE))
    return path


def run(path: Path, tmp_path: Path, **kw):
    return run_document(path, tmp_path, tmp_path / "sandbox", **kw)


# ---- reading the markdown ---------------------------------------------------------------


def test_blocks_with_their_language_line_markers_and_commands(tmp_path):
    path = doc(
        tmp_path,
        "# T\n"  # 1
        "\n"  # 2
        "~~~sh\n"  # 3
        "echo one\n"  # 4
        "~~~\n"  # 5
        "<!-- expect: one -->\n"  # 6
        "<!-- expect: ^o -->\n"  # 7
        "<!-- skip: needs a GPU -->\n"  # 8
        "~~~bash\n"  # 9
        "nvidia-smi\n"  # 10
        "~~~\n"  # 11
        "~~~console\n"  # 12
        "$ echo two \\\n"  # 13
        "    three\n"  # 14
        "two three\n"  # 15
        "~~~\n"  # 16
        "~~~python\n"  # 17
        "print(1)\n"  # 18
        "~~~\n",
    )
    blocks = extract_blocks(path)
    assert [(b.line, b.language, b.runs) for b in blocks] == [
        (3, "sh", True),
        (9, "bash", False),
        (12, "console", True),
        (17, "python", False),
    ]
    assert blocks[0].expects == ["one", "^o"]
    assert blocks[1].skip == "needs a GPU"
    # the console block's output line is blank: its commands keep their line numbers
    assert blocks[2].text == "echo two \\\n    three\n"


@pytest.mark.parametrize(
    "text, line, problem",
    [
        ("text\n<!-- expect: x -->\n", 2, "belongs right after a block"),
        ("~~~sh\ntrue\n~~~\n\ntext\n<!-- expect: x -->\n", 6, "belongs right after a block"),
        ("<!-- skip:  -->\n~~~sh\ntrue\n~~~\n", 1, "must say why"),
        ("<!-- skip: why -->\ntext\n~~~sh\ntrue\n~~~\n", 1, "no block after it"),
        ("<!-- skip: why -->\n~~~text\ntrue\n~~~\n", 1, "never runs"),
        ("~~~sh\ntrue\n", 1, "never closed"),
        ("~~~sh\ntrue\n~~~\n<!-- expect: ( -->\n", 4, "no regular expression"),
        ("<!-- skip: why -->\n~~~sh\ntrue\n~~~\n<!-- expect: x -->\n", 5, "does not run"),
    ],
)
def test_a_malformed_marker_is_named_by_its_line(tmp_path, text, line, problem):
    path = doc(tmp_path, text)
    with pytest.raises(DocumentError, match=problem) as e:
        extract_blocks(path)
    assert str(e.value).startswith(f"{path}:{line}:")


def test_placeholders_in_commands_are_found_and_those_in_comments_are_not(tmp_path):
    path = doc(
        tmp_path,
        "~~~sh\n"
        "comminsight sim [--fault SPEC]\n"  # 2
        "torchrun ...\n"  # 3
        "make install TRAINING_PYTHON=/path/to/python\n"  # 4
        "cp dist/<wheel> .\n"  # 5
        "make build-inject   # dist/comminsight_inject-<version>.whl, see ...\n"
        "~~~\n",
    )
    found = placeholders(extract_blocks(path)[0])
    assert [f.split(":")[1] for f in found] == ["2", "3", "4", "5"]


# ---- running it ------------------------------------------------------------------------


def test_blocks_share_one_shell_in_a_fresh_home(tmp_path):
    path = doc(
        tmp_path,
        "~~~sh\nexport GREETING=hello\nmkdir -p ~/made && cd ~/made\n~~~\n"
        '~~~sh\necho "$GREETING from $PWD"\necho "autostart=$COMMINSIGHT_AGENT_AUTOSTART"\n~~~\n'
        f"<!-- expect: ^hello from {re.escape(str(tmp_path))}/sandbox/home/made$ -->\n"
        "<!-- expect: autostart=0 -->\n",
    )
    result = run(path, tmp_path)
    assert result.failures() == []
    assert [r.state for r in result.results] == ["ok", "ok"]


def test_a_failing_command_is_named_by_its_line_and_ends_the_document(tmp_path):
    path = doc(
        tmp_path,
        "Intro\n"  # 1
        "~~~sh\n"  # 2
        "echo before\n"  # 3
        "ls /no/such/directory\n"  # 4
        "echo after\n"  # 5
        "~~~\n"  # 6
        "~~~sh\n"  # 7
        "echo never\n"  # 8
        "~~~\n",
    )
    result = run(path, tmp_path)
    failures = result.failures()
    assert len(failures) == 1
    assert failures[0].startswith(f"{path}:4: the command failed with status 2")
    assert "No such file or directory" in failures[0] and "before" in failures[0]
    assert "after" not in result.results[0].output
    assert result.results[1].state == "not reached"


def test_a_failure_inside_a_pipeline_or_a_subshell_fails_its_line(tmp_path):
    path = doc(tmp_path, "~~~sh\ntrue\nfalse | cat\n~~~\n~~~sh\n( true; exit 3 )\n~~~\n")
    assert run(path, tmp_path).failures()[0].startswith(f"{path}:3: the command failed")
    path = doc(tmp_path, "~~~sh\ntrue\n( true; exit 3 )\n~~~\n", "sub.md")
    assert (
        run(path, tmp_path).failures()[0].startswith(f"{path}:3: the command failed with status 3")
    )


def test_an_unset_variable_fails(tmp_path):
    path = doc(tmp_path, '~~~sh\necho "$NO_SUCH_VARIABLE_IN_DOCS"\n~~~\n')
    assert run(path, tmp_path).failures()[0].startswith(f"{path}:2: the command failed")


def test_a_missing_expectation_names_the_block(tmp_path):
    path = doc(
        tmp_path,
        "~~~sh\necho 'Step summaries: 0'\n~~~\n<!-- expect: Step summaries: [1-9] -->\n",
    )
    failures = run(path, tmp_path).failures()
    assert len(failures) == 1
    assert failures[0].startswith(f"{path}:1: the block's output lacks /Step summaries: [1-9]/")
    assert "Step summaries: 0" in failures[0]


def test_an_unmarked_block_that_cannot_run_here_fails(tmp_path):
    path = doc(tmp_path, "~~~sh\nno-such-launcher-for-docs --nproc-per-node 2 train.py\n~~~\n")
    failures = run(path, tmp_path).failures()
    assert failures[0].startswith(f"{path}:2: the command failed with status 127")


def test_a_block_past_its_timeout_is_named_and_stopped(tmp_path):
    path = doc(tmp_path, "~~~sh\necho started\nsleep 600\n~~~\n~~~sh\necho never\n~~~\n")
    result = run(path, tmp_path, block_timeout_s=1)
    failures = result.failures()
    assert failures[0].startswith(f"{path}:1: the block ran past its timeout")
    assert "started" in failures[0]
    assert result.results[1].state == "not reached"


def test_background_processes_are_ended_with_the_document(tmp_path):
    pid_file = tmp_path / "pid"
    path = doc(tmp_path, f"~~~sh\nsleep 600 &\necho $! > {pid_file}\n~~~\n")
    assert run(path, tmp_path).failures() == []
    pid = int(pid_file.read_text())

    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"

    wait_until(gone, 30, f"the background sleep {pid} to end")

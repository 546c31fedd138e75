"""The documentation's commands work as written: every shell block of README.md and docs/*.md
runs, in order, in one shell per document, as a newcomer on a fresh machine would run it (a
fresh HOME, the repository as working directory, the simulated NCCL and a real Agent), and
prints what the HTML comment after it expects. A block that cannot run here says why, and is
one of the few listed below."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from doc_blocks import extract_blocks, placeholders, run_document, sandbox_env
from ports import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# The blocks that do not run here, by document and how their first line starts; each also says
# why in its skip marker. Other tests or CI run them (the demo, the install into a temporary
# prefix) or they need what this machine lacks (GPUs). A new skip must be added here, so it is
# a decision, not a way to silence a block that broke.
SKIPPED = {
    ("README.md", "make demo"),  # make demo and make test, minutes each
    ("README.md", "torchrun"),  # GPUs, PyTorch and a training script
    ("README.md", "make install INSTALL_PREFIX=/opt/comminsight"),  # root, under /opt
    ("docs/deploy-kubernetes.md", "kubectl create namespace"),  # a Kubernetes cluster
    ("docs/deploy-slurm.md", "make install INSTALL_PREFIX=/opt"),  # root: /opt, systemctl
    ("docs/deploy-slurm.md", "install -m 0600 -o root"),  # root: /opt, systemctl
    ("docs/deploy-slurm.md", "install -D -m 0755 deploy/slurm/"),  # root, into /etc/slurm
    ("docs/deploy-slurm.md", "srun --export=ALL"),  # Slurm, GPUs and a training script
}


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _ids(paths):
    return [_name(p) for p in paths]


@pytest.mark.parametrize("document", DOCUMENTS, ids=_ids(DOCUMENTS))
def test_markers_are_well_formed_and_runnable_blocks_hold_no_placeholder(document):
    found = [p for b in extract_blocks(document) if b.runs for p in placeholders(b)]
    assert not found, "write a command that runs, or mark the block skipped:\n" + "\n".join(found)


def test_skipped_blocks_are_the_few_known_ones_and_say_why():
    # extract_blocks refuses a skip marker without a reason
    skipped = [(_name(b.path), b) for d in DOCUMENTS for b in extract_blocks(d) if b.skip]

    def listed(name, block):
        return [
            (doc, start)
            for doc, start in SKIPPED
            if name == doc and block.first_line.startswith(start)
        ]

    unknown = [block.where for name, block in skipped if not listed(name, block)]
    assert not unknown, f"skipped blocks not in SKIPPED (say why there): {unknown}"
    matched = {entry for name, block in skipped for entry in listed(name, block)}
    assert matched == SKIPPED, f"SKIPPED lists blocks that no longer skip: {SKIPPED - matched}"


def _run(document: Path, tmp_path: Path, workdir: Path = ROOT):
    # The Agent's default port may be taken by another test's Agent or a real one; the CLI and
    # the Agent both read COMMINSIGHT_AGENT_LISTEN, so the documented commands stay as written.
    env = sandbox_env(
        tmp_path / "home",
        tmp_path / "tmp",
        COMMINSIGHT_AGENT_LISTEN=f"127.0.0.1:{free_port()}",
    )
    return run_document(document, workdir, tmp_path, env=env)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("document", DOCUMENTS, ids=_ids(DOCUMENTS))
def test_documented_commands_work_as_written(document, tmp_path):
    if not any(b.runs for b in extract_blocks(document)):
        return
    run = _run(document, tmp_path)
    failures = run.failures()
    assert not failures, "\n".join(failures)
    assert all(r.state == "ok" for r in run.results)


@pytest.mark.timeout(600)
def test_a_broken_command_in_a_copy_of_the_readme_is_named_by_file_and_line(tmp_path):
    copy = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", copy)
    blocks = [b for b in extract_blocks(copy) if b.runs]
    lines = copy.read_text().splitlines()
    # the first documented `comminsight` command, misspelt as a newcomer might type it
    target = next(
        b.line + 1 + k
        for b in blocks
        for k, line in enumerate(b.text.splitlines())
        if ".venv/bin/comminsight " in line
    )
    lines[target - 1] = lines[target - 1].replace(
        ".venv/bin/comminsight ", ".venv/bin/comminsight-misspelt ", 1
    )
    copy.write_text("\n".join(lines) + "\n")

    run = _run(copy, tmp_path / "sandbox")

    failures = run.failures()
    assert failures, "a misspelt command passed"
    assert failures[0].startswith(f"{copy}:{target}: the command failed with status 127")
    assert re.search(r"comminsight-misspelt: No such file", failures[0]), failures[0]
    failed = next(k for k, r in enumerate(run.results) if r.state == "failed")
    assert all(r.state == "not reached" for r in run.results[failed + 1 :])

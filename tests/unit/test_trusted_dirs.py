"""home_check.make_trusted_dirs: a directory to write into, made where missing, through the
home's trust walk (the Agent's recovery and the offline CLI write only through it)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from comminsight.agent.receivers import home_check
from comminsight.agent.receivers.home_check import HomeError, make_trusted_dirs

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
NOBODY = 65534


def test_missing_levels_are_made_private_and_a_relative_path_is_taken_from_here(
    tmp_path, monkeypatch
):
    (tmp_path / "here").mkdir(mode=0o700)
    monkeypatch.chdir(tmp_path / "here")
    made = make_trusted_dirs(Path("../a/b/c"))
    assert made == tmp_path / "a" / "b" / "c" and made.is_dir()
    for level in (made, made.parent, made.parent.parent):
        assert stat.S_IMODE(level.stat().st_mode) == 0o700
    assert make_trusted_dirs(made) == made  # there already: accepted as it is


def test_a_file_where_a_level_belongs_is_named(tmp_path):
    (tmp_path / "a").write_text("")
    with pytest.raises(HomeError, match=f"{tmp_path / 'a'}: is not a directory"):
        make_trusted_dirs(tmp_path / "a" / "b")


def test_a_directory_others_may_write_is_refused(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    with pytest.raises(HomeError, match=f"{loose}: is writable by group or others"):
        make_trusted_dirs(loose)


@ROOT_ONLY
def test_a_link_planted_after_the_walk_is_refused_and_nothing_made_past_it(tmp_path, monkeypatch):
    """Another user puts a link where a level is about to be made (in a directory they may
    write, as /tmp): the mkdir finds it there, and it is checked like any level, not used."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky, like /tmp: passed by the walk
    target = tmp_path / "root-only"
    target.mkdir(mode=0o700)
    level = shared / "out"
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, **kw):
        if Path(path) == level and not os.path.lexists(level):
            level.symlink_to(target)
            os.lchown(level, NOBODY, NOBODY)
        return real_mkdir(path, mode, **kw)

    monkeypatch.setattr(home_check.os, "mkdir", mkdir)
    with pytest.raises(HomeError, match=f"{level}: is a symbolic link"):
        make_trusted_dirs(level / "step")
    assert list(target.iterdir()) == []


@ROOT_ONLY
def test_a_dotdot_after_a_link_is_walked_both_ways(tmp_path):
    """`mine/x/../b`: the kernel goes through x's target, the levels are made along mine/b;
    a link of another user at mine/b is refused, though the kernel's way never meets it."""
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (mine / "x").symlink_to(tmp_path / "elsewhere")
    target = tmp_path / "root-only"
    target.mkdir(mode=0o700)
    (mine / "b").symlink_to(target)
    os.lchown(mine / "b", NOBODY, NOBODY)
    with pytest.raises(HomeError, match=f"symbolic link owned by uid {NOBODY}"):
        make_trusted_dirs(mine / "x" / ".." / "b" / "c")
    assert list(target.iterdir()) == []

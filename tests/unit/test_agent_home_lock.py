"""One Agent per home, even when its lock file is deleted or replaced under it."""

from __future__ import annotations

import os

from comminsight.agent.main import take_lock


def test_a_second_agent_is_kept_out_while_the_first_holds_the_home(tmp_path):
    first = take_lock(tmp_path)
    assert first is not None
    try:
        assert take_lock(tmp_path) is None
    finally:
        first.close()
    again = take_lock(tmp_path)
    assert again is not None
    again.close()


def test_deleting_or_replacing_the_lock_file_lets_no_second_agent_in(tmp_path):
    first = take_lock(tmp_path)
    lock = tmp_path / "metadata" / "agent.lock"
    try:
        os.unlink(lock)
        assert take_lock(tmp_path) is None  # a fresh agent.lock is free, the home is not
        lock.write_text("")  # another user's or a tool's replacement
        assert take_lock(tmp_path) is None
    finally:
        first.close()


def test_the_lock_file_is_private_and_not_followed_through_a_link(tmp_path):
    (tmp_path / "metadata").mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("")
    (tmp_path / "metadata" / "agent.lock").symlink_to(victim)
    try:
        take_lock(tmp_path)
    except OSError:
        pass  # refused: a link is never opened
    else:
        raise AssertionError("a planted link was taken as the lock file")
    os.unlink(tmp_path / "metadata" / "agent.lock")
    held = take_lock(tmp_path)
    try:
        assert oct((tmp_path / "metadata" / "agent.lock").stat().st_mode & 0o777) == "0o600"
    finally:
        held.close()

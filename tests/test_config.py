"""Settings resolution: environment beats file beats default; bad values name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from comminsight.config import ConfigError, load_settings
from comminsight_gen.config_v1 import KEYS

ROOT = Path(__file__).resolve().parent.parent


def test_defaults_come_from_the_schema(tmp_path):
    s = load_settings(env={"COMMINSIGHT_HOME": str(tmp_path)})
    for key in KEYS:
        if key.name != "COMMINSIGHT_HOME":
            assert getattr(s, key.field) == key.default, key.name
    assert s.agent_listen == "127.0.0.1:19102" and s.agent_mode == "standalone"
    assert s.agent_autostart is True and s.agent_master_listen == "0.0.0.0:19103"


def test_every_fixed_design_key_exists():
    names = {k.name for k in KEYS}
    for fixed in (
        "COMMINSIGHT_HOME",
        "COMMINSIGHT_CONF",
        "COMMINSIGHT_AGENT_LISTEN",
        "COMMINSIGHT_AGENT_AUTOSTART",
        "COMMINSIGHT_AGENT_MODE",
        "COMMINSIGHT_AGENT_MASTER_LISTEN",
        "COMMINSIGHT_AGENT_MASTER_ADDR",
        "COMMINSIGHT_AGENT_NODE_NAME",
        "COMMINSIGHT_AGENT_TOKEN",
        "COMMINSIGHT_PROFILER_EVENT_MASK",
        "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S",
        "COMMINSIGHT_COMMON_ARCHIVE_URL",
        "COMMINSIGHT_INJECT_DISABLE",
    ):
        assert fixed in names


def test_file_beats_default_and_environment_beats_file(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text(
        "# comment\n\nCOMMINSIGHT_AGENT_LISTEN=127.0.0.1:1\n"
        "export COMMINSIGHT_PROFILER_RING_SLOTS = 1024\n"
        "COMMINSIGHT_AGENT_TOKEN='s3cret'\n"
    )
    s = load_settings(
        env={"COMMINSIGHT_CONF": str(conf), "COMMINSIGHT_AGENT_LISTEN": "127.0.0.1:2"}
    )
    assert s.agent_listen == "127.0.0.1:2"
    assert s.profiler_ring_slots == 1024
    assert s.agent_token == "s3cret"


def test_default_file_under_home_is_read(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/comminsight.conf").write_text("COMMINSIGHT_AGENT_MODE=master\n")
    assert load_settings(env={"COMMINSIGHT_HOME": str(tmp_path)}).agent_mode == "master"


@pytest.mark.parametrize("text", ["1", "true", "YES", "on"])
def test_boolean_spellings(text, tmp_path):
    assert (
        load_settings(
            env={"COMMINSIGHT_HOME": str(tmp_path), "COMMINSIGHT_INJECT_DISABLE": text}
        ).inject_disable
        is True
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("COMMINSIGHT_AGENT_MODE", "leader", "Invalid enum value 'leader'"),
        ("COMMINSIGHT_PROFILER_RING_SLOTS", "12", "Expected `int` >= 64"),
        ("COMMINSIGHT_PROFILER_RING_SLOTS", "lots", "expected integer"),
        ("COMMINSIGHT_AGENT_AUTOSTART", "maybe", "expected 1/0"),
        ("COMMINSIGHT_AGENT_LISTEN", "no-port", "Expected `str` matching regex"),
        ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", "-1", "Expected `float` >= 0.0"),
    ],
)
def test_bad_environment_value_names_the_key(key, value, message, tmp_path):
    with pytest.raises(ConfigError) as e:
        load_settings(env={"COMMINSIGHT_HOME": str(tmp_path), key: value})
    assert key in str(e.value) and "environment" in str(e.value) and message in str(e.value)


def test_bad_file_value_names_key_file_and_line(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("COMMINSIGHT_AGENT_MODE=master\nCOMMINSIGHT_AGENT_POLL_INTERVAL_MS=0\n")
    with pytest.raises(
        ConfigError, match=r"COMMINSIGHT_AGENT_POLL_INTERVAL_MS='0' \(.*c\.conf:2\)"
    ):
        load_settings(env={"COMMINSIGHT_CONF": str(conf)})


def test_unknown_key_and_garbage_line_in_file(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("COMMINSIGHT_AGENT_LISTN=1.2.3.4:5\n")
    with pytest.raises(ConfigError, match=r"c\.conf:1: unknown key COMMINSIGHT_AGENT_LISTN"):
        load_settings(env={"COMMINSIGHT_CONF": str(conf)})
    conf.write_text("just words\n")
    with pytest.raises(ConfigError, match=r"c\.conf:1: expected KEY=VALUE"):
        load_settings(env={"COMMINSIGHT_CONF": str(conf)})


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load_settings(env={"COMMINSIGHT_CONF": str(tmp_path / "absent.conf")})


def test_shipped_config_file_is_valid():
    s = load_settings(env={}, conf_path=ROOT / "config" / "comminsight.conf")
    assert s.agent_listen == "127.0.0.1:19102"

"""Settings resolution: environment beats file beats default; bad values name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from comminsight.config import ConfigError, load_settings
from comminsight_gen.config_v1 import KEYS

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize("home", ["rel/home", ".", "./x"])
def test_a_relative_home_is_refused_naming_the_key(home):
    with pytest.raises(ConfigError) as e:
        load_settings(env={"COMMINSIGHT_HOME": home})
    assert str(e.value).startswith(f"COMMINSIGHT_HOME={home!r} (environment): a relative path")


@pytest.mark.parametrize(
    ("key", "value", "control"),
    [
        ("COMMINSIGHT_AGENT_TOKEN", "s3cret\r\nX-Injected: 1", "U+000D"),
        ("COMMINSIGHT_AGENT_TOKEN", "s3cret\n", "U+000A"),  # re.search's $ lets this one by
        ("COMMINSIGHT_AGENT_TOKEN", "s3\x1bcret", "U+001B"),
        ("COMMINSIGHT_AGENT_NODE_NAME", "node-a\nnode-b", "U+000A"),
        ("COMMINSIGHT_AGENT_NODE_NAME", "node-a\n", "U+000A"),
        ("COMMINSIGHT_AGENT_NODE_NAME", "node\x7f", "U+007F"),
        ("COMMINSIGHT_AGENT_LISTEN", "127.0.0.1:19102\n", "U+000A"),
    ],
)
def test_control_characters_in_a_token_or_node_name_are_refused_naming_the_key(
    key, value, control, tmp_path
):
    with pytest.raises(ConfigError) as e:
        load_settings(env={"COMMINSIGHT_HOME": str(tmp_path), key: value})
    message = str(e.value)
    assert message.startswith(f"{key}=") and "(environment)" in message
    assert f"control character {control}" in message
    if key == "COMMINSIGHT_AGENT_TOKEN":
        assert "s3" not in message and "cret" not in message  # the secret is not echoed


def test_a_control_character_in_a_file_value_is_refused_naming_file_and_line(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_bytes(b"COMMINSIGHT_AGENT_MODE=master\nCOMMINSIGHT_AGENT_TOKEN=ab\x07cd\n")
    with pytest.raises(ConfigError, match=r"COMMINSIGHT_AGENT_TOKEN='\*\*\*' \(.*c\.conf:2\)"):
        load_settings(env={"COMMINSIGHT_CONF": str(conf)})


@pytest.mark.parametrize("name", ["../elsewhere", "a/b", "-node", "node name"])
def test_a_node_name_a_master_would_refuse_is_refused(name, tmp_path):
    with pytest.raises(ConfigError, match="COMMINSIGHT_AGENT_NODE_NAME="):
        load_settings(env={"COMMINSIGHT_HOME": str(tmp_path), "COMMINSIGHT_AGENT_NODE_NAME": name})


def test_printable_tokens_and_ordinary_node_names_are_kept(tmp_path):
    token = "".join(chr(c) for c in range(0x21, 0x7F))  # every printable character but space
    s = load_settings(
        env={
            "COMMINSIGHT_HOME": str(tmp_path),
            "COMMINSIGHT_AGENT_TOKEN": f"a {token}",
            "COMMINSIGHT_AGENT_NODE_NAME": "gpu-node_01.rack2",
        }
    )
    assert s.agent_token == f"a {token}" and s.agent_node_name == "gpu-node_01.rack2"

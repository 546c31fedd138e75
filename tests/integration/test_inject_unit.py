"""Inject's parts without a process group: settings, the NCCL config writer, naming plans,
metadata lines, the import hook and the adapter's safety (fake torch modules, in process)."""

from __future__ import annotations

import ctypes
import json
import os
import stat
import subprocess
import sys
import textwrap
import types
import zipfile
from pathlib import Path

import pytest
from nccl_config_structs import (
    UNDEF,
    FakeConfig,
    FakeOptions,
    NcclConfig,
    OptionsStruct,
    new_options_struct,
)

from comminsight.inject import group_naming, nccl_config, settings, startup, state, torch_adapter
from comminsight.inject.metadata import MetadataFile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def inject_wheel() -> Path:
    """dist/comminsight_inject-*.whl, built by the Makefile's one recipe."""
    subprocess.run(["make", "-s", "build-inject"], cwd=ROOT, check=True, capture_output=True)
    from comminsight.inject import __version__

    return ROOT / "dist" / f"comminsight_inject-{__version__}-py3-none-any.whl"


@pytest.fixture(autouse=True)
def _fresh_state():
    state.reset_for_tests()
    torch_adapter.deactivate_for_tests()
    yield
    torch_adapter.deactivate_for_tests()
    state.reset_for_tests()


# ---------------------------------------------------------------------------- settings


def test_settings_environment_beats_file_beats_default(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("COMMINSIGHT_INJECT_STEP_MARKERS=no\nCOMMINSIGHT_OTHER_KEY=x\n")
    env = {"COMMINSIGHT_HOME": str(tmp_path), "COMMINSIGHT_CONF": str(conf)}
    s = settings.load(env)
    assert (s.home, s.disable, s.step_markers, s.step_markers_asked) == (
        tmp_path,
        False,
        False,
        True,
    )
    s = settings.load({**env, "COMMINSIGHT_INJECT_STEP_MARKERS": "1"})
    assert (s.step_markers, s.step_markers_asked) == (True, True)
    s = settings.load({"COMMINSIGHT_HOME": str(tmp_path / "none")})
    assert (s.step_markers, s.step_markers_asked) == (True, False)  # on unless turned off


def test_settings_bad_value_names_the_key_and_origin(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("COMMINSIGHT_INJECT_DISABLE=maybe\n")
    with pytest.raises(
        settings.SettingsError, match=r"COMMINSIGHT_INJECT_DISABLE='maybe'.*c\.conf:1"
    ):
        settings.load({"COMMINSIGHT_CONF": str(conf)})


def test_settings_keys_are_the_config_protocols():
    from comminsight_gen.config_v1 import KEY_BY_NAME

    for key, default in settings.DEFAULTS.items():
        assert KEY_BY_NAME[key].default == default
        assert "inject" in KEY_BY_NAME[key].components


def test_inject_version_is_the_projects():
    from comminsight import inject

    text = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{inject.__version__}"' in text


# ---------------------------------------------------------------------------- NCCL config


@pytest.fixture
def fake_pointers(monkeypatch):
    """Stand in for pybind11's value pointers: FakeOptions/FakeConfig -> their structs."""

    def pointer(obj):
        if isinstance(obj, FakeOptions):
            return ctypes.addressof(obj.struct)
        if isinstance(obj, FakeConfig):
            return ctypes.addressof(obj._s)
        raise nccl_config.LayoutError("not a fake")

    monkeypatch.setattr(nccl_config, "_pybind_value_pointer", pointer)


def test_pybind_value_pointer_reaches_the_cpp_object():
    """On a real pybind11 object of torch: a field set through pybind is found at the address
    the pointer gives, and follows the next set."""
    import torch.distributed as dist

    opts = dist.ProcessGroupGloo._Options()
    opts._threads = 0x5A17C0DE
    at = nccl_config._pybind_value_pointer(opts)
    hits = [o for o in range(0, 1024, 4) if ctypes.c_uint.from_address(at + o).value == 0x5A17C0DE]
    assert len(hits) == 1
    opts._threads = 7
    assert ctypes.c_uint.from_address(at + hits[0]).value == 7


def test_nccl_config_gets_the_name_and_keeps_it_alive(fake_pointers):
    opts = FakeOptions(new_options_struct())
    assert nccl_config.set_comm_name(opts, "mesh_tp:5") == nccl_config.NCCL_CONFIG
    pointer = opts.struct.config.commName
    assert ctypes.string_at(pointer) == b"mesh_tp:5"
    assert nccl_config.comm_name_of(opts) == "mesh_tp:5"
    # Inject may rename what it named (torch reuses one options object for several groups)
    assert nccl_config.set_comm_name(opts, "other:6") == nccl_config.NCCL_CONFIG
    assert ctypes.string_at(opts.struct.config.commName) == b"other:6"
    assert ctypes.string_at(pointer) == b"mesh_tp:5"  # an old name stays valid for NCCL
    # the other fields are untouched
    assert opts.struct.config.blocking == UNDEF and opts.struct.config.netName is None


def test_nccl_config_keeps_the_users_name(fake_pointers):
    opts = FakeOptions(new_options_struct())
    users = ctypes.create_string_buffer(b"users-own")
    opts.struct.config.commName = ctypes.addressof(users)
    assert nccl_config.set_comm_name(opts, "default_pg:0") == nccl_config.USER_NAMED
    assert opts.struct.config.commName == ctypes.addressof(users)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"magic": 0x12345678}, "magic"),
        ({"version": 22603}, "no commName"),
        ({"size": 8}, "size"),
        ({"minCTAs": 4}, "min_ctas differs"),
    ],
)
def test_nccl_config_refuses_an_unproven_layout_and_writes_nothing(fake_pointers, change, message):
    struct = new_options_struct()
    opts = FakeOptions(struct)
    if "minCTAs" in change:  # pybind says one thing, the memory another
        opts.config = FakeConfig(struct.config, lies={"min_ctas": change.pop("minCTAs")})
    for field, value in change.items():
        setattr(struct.config, field, value)
    before = bytes(struct)
    with pytest.raises(nccl_config.LayoutError, match=message):
        nccl_config.set_comm_name(opts, "x:1")
    assert bytes(struct) == before


def test_nccl_config_refuses_a_config_outside_its_options(fake_pointers):
    """A config object that is a copy (elsewhere in memory) would not reach NCCL: refused
    before anything is read through its pointer."""
    arena = (ctypes.c_char * 16384)()
    elsewhere = NcclConfig.from_buffer(arena, 0)  # before the options object
    opts = FakeOptions(OptionsStruct.from_buffer(arena, 8192))
    ctypes.memmove(ctypes.addressof(elsewhere), ctypes.addressof(new_options_struct().config), 80)
    opts.config = FakeConfig(elsewhere)
    with pytest.raises(nccl_config.LayoutError, match="not a member"):
        nccl_config.set_comm_name(opts, "x:1")
    assert elsewhere.commName is None


def test_torch_option_is_used_where_torch_has_it():
    config = types.SimpleNamespace(comm_name=None)
    opts = types.SimpleNamespace(config=config)
    assert nccl_config.set_comm_name(opts, "tp:3") == nccl_config.TORCH_OPTION
    assert config.comm_name == "tp:3"
    config.comm_name = "mine"
    assert nccl_config.set_comm_name(opts, "tp:4") == nccl_config.USER_NAMED
    assert config.comm_name == "mine"


def test_options_without_config_are_a_layout_error():
    with pytest.raises(nccl_config.LayoutError, match="no config"):
        nccl_config.set_comm_name(object(), "x:1")


# ---------------------------------------------------------------------------- naming plans


class FakeBackendConfig:
    def __init__(self, backend):
        text = str(backend)
        if ":" in text:
            self.map = dict(part.split(":") for part in text.split(","))
        else:
            self.map = {"cpu": "gloo", "cuda": text} if text == "nccl" else {"cpu": text}

    def get_device_backend_map(self):
        return self.map


def fake_c10d(with_nccl: bool = True):
    c10d = types.SimpleNamespace(Backend=str, BackendConfig=FakeBackendConfig)
    if with_nccl:

        class Options:
            def __init__(self):
                self.config = types.SimpleNamespace(comm_name=None)
                self.is_high_priority_stream = True
                self._timeout = None

        c10d.ProcessGroupNCCL = types.SimpleNamespace(Options=Options)
    return c10d


def helper_args(**over):
    args = {
        "group_size": 2,
        "group_rank": 1,
        "global_ranks_in_group": [0, 1],
        "backend": "nccl",
        "store": None,
        "group_name": "7",
        "timeout": 600,
        "group_desc": "mesh_tp",
    }
    args.update(over)
    return args


def test_plan_names_default_nccl_options_like_torch_makes_them():
    c10d, args = fake_c10d(), helper_args()
    plan = group_naming.plan_helper(c10d, args)
    assert (plan.comm_name, plan.naming) == ("mesh_tp:7", nccl_config.TORCH_OPTION)
    opts = args["backend_options"]
    assert opts.config.comm_name == "mesh_tp:7"
    assert (opts.is_high_priority_stream, opts._timeout) == (False, 600)


def test_plan_names_the_users_options_in_place():
    c10d = fake_c10d()
    users = c10d.ProcessGroupNCCL.Options()
    args = helper_args(backend_options=users, group_desc=None)
    plan = group_naming.plan_helper(c10d, args)
    assert args["backend_options"] is users and users.config.comm_name == "undefined:7"
    assert plan.group_desc == "undefined"


@pytest.mark.parametrize(
    "backend, with_nccl, naming",
    [
        ("gloo", True, group_naming.NO_NCCL),
        ("nccl", False, group_naming.NO_NCCL_BUILD),
        ("cpu:custom,cuda:nccl", True, group_naming.FOREIGN_OPTIONS),
    ],
)
def test_plan_leaves_other_backends_alone(backend, with_nccl, naming):
    args = helper_args(backend=backend)
    plan = group_naming.plan_helper(fake_c10d(with_nccl), args)
    assert plan.naming == naming
    assert "backend_options" not in args
    assert plan.comm_name == "mesh_tp:7"  # computed all the same, for the metadata


# ---------------------------------------------------------------------------- metadata


def test_metadata_lines_and_permissions(tmp_path):
    sink = MetadataFile(tmp_path, {"torch_version": "x"}, pid=4242, host="h")
    assert sink.write("group", comm_name="a:1")
    assert sink.write("step", mono_ns=5, index=0)
    sink.close()
    path = tmp_path / "metadata" / "inject" / "h.4242.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["process", "group", "step"]
    assert lines[0]["torch_version"] == "x" and lines[2]["mono_ns"] == 5
    assert all(x["schema"] == "comminsight.inject-metadata.v1" and x["pid"] == 4242 for x in lines)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_metadata_failure_warns_once_and_returns_false(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    sink = MetadataFile(blocker, pid=1, host="h")  # home is a file: no directory under it
    assert not sink.write("group")
    assert not sink.write("group")
    assert capsys.readouterr().err.count("comminsight-inject: cannot write") == 1


# ---------------------------------------------------------------------------- import hook


def run_python(code: str, tmp_path: Path, *flags: str, **env) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "COMMINSIGHT_INJECT_DISABLE"}
    full_env.update(PYTHONPATH=f"{tmp_path}:{ROOT}", **env)
    return subprocess.run(
        [sys.executable, *flags, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        cwd=tmp_path,
    )


FAKE_TORCH = {
    # as real torch: torch.distributed first, the optimizers (step markers' hook) later
    "torch/__init__.py": "__version__ = '2.13.0'\nimport torch.distributed\nimport torch.optim\n",
    "torch/optim/__init__.py": "from . import optimizer\n",
    "torch/optim/optimizer.py": textwrap.dedent(
        """
        HOOKS = []
        def register_optimizer_step_post_hook(hook):
            HOOKS.append(hook)
        """
    ),
    "torch/distributed/__init__.py": "from . import distributed_c10d\nLOADED = True\n",
    "torch/distributed/distributed_c10d.py": textwrap.dedent(
        """
        CALLS = []
        def _new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend,
                                      store, group_name, backend_options=None, timeout=None,
                                      pg_tag=None, device_id=None, group_desc=None):
            CALLS.append((group_name, backend_options))
            return PG(group_name, max(group_rank, 0), max(group_size, 1)), None
        class PG:
            def __init__(self, name, rank, size):
                self.group_name, self._rank, self._size = name, rank, size
            def rank(self):
                return self._rank
            def size(self):
                return self._size
        class Backend(str):
            pass
        class BackendConfig:
            def __init__(self, backend):
                self.b = str(backend)
            def get_device_backend_map(self):
                return {"cpu": self.b}
        """
    ),
}


def write_fake_torch(root: Path, files: dict[str, str] = FAKE_TORCH) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


HOOKED = """
    import sys
    from comminsight.inject import startup
    hook = startup.install()
    print("hook", hook is not None, "torch" in sys.modules)
"""


def test_hook_is_lazy_and_fires_when_torch_distributed_is_imported(tmp_path):
    write_fake_torch(tmp_path)
    out = run_python(
        HOOKED
        + """
    import torch.distributed.distributed_c10d as c10d
    from comminsight.inject import torch_adapter
    print("wrapped", getattr(c10d._new_process_group_helper, "__comminsight_inject__", False))
    print("loader", type(sys.modules["torch.distributed"].__loader__).__name__)
    print("hook left", any(isinstance(f, startup.TorchDistributedHook) for f in sys.meta_path))
    c10d._new_process_group_helper(1, 0, [], "gloo", None, "0", timeout=5, group_desc="d")
    print("plans", [p.comm_name for p in torch_adapter.active().plans])
    import torch.optim.optimizer as optimizer
    print("step hooks", len(optimizer.HOOKS))
    """,
        tmp_path,
        COMMINSIGHT_HOME=str(tmp_path / "home"),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "hook True False",
        "wrapped True",
        "loader SourceFileLoader",
        "hook left False",
        "plans ['d:0']",
        "step hooks 1",
    ]
    assert out.stderr == ""


def test_torch_missing(tmp_path):
    """No torch at all (-S: no site-packages): the program's ImportError is Python's own."""
    out = run_python(
        HOOKED
        + """
    try:
        import torch.distributed
    except ImportError as e:
        print("ImportError", e.name)
    print("still hooked", any(isinstance(f, startup.TorchDistributedHook) for f in sys.meta_path))
    """,
        tmp_path,
        "-S",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["hook True False", "ImportError torch", "still hooked True"]
    assert out.stderr == ""


def test_disable_in_the_environment_installs_nothing(tmp_path):
    write_fake_torch(tmp_path)
    out = run_python(
        HOOKED
        + """
    import torch.distributed.distributed_c10d as c10d
    print("wrapped", hasattr(c10d._new_process_group_helper, "__comminsight_inject__"))
    """,
        tmp_path,
        COMMINSIGHT_INJECT_DISABLE="1",
    )
    assert out.stdout.splitlines() == ["hook False False", "wrapped False"]


def test_disable_in_the_config_file_wraps_nothing(tmp_path):
    write_fake_torch(tmp_path)
    conf = tmp_path / "c.conf"
    conf.write_text("COMMINSIGHT_INJECT_DISABLE=1\n")
    out = run_python(
        HOOKED
        + """
    import torch.distributed.distributed_c10d as c10d
    print("wrapped", hasattr(c10d._new_process_group_helper, "__comminsight_inject__"))
    """,
        tmp_path,
        COMMINSIGHT_CONF=str(conf),
    )
    assert out.stdout.splitlines() == ["hook True False", "wrapped False"]
    assert out.stderr == ""


def test_a_failing_activation_never_fails_the_import(tmp_path):
    files = dict(FAKE_TORCH)
    files["torch/__init__.py"] = "__version__ = property\nimport torch.distributed\n"
    write_fake_torch(tmp_path, files)
    out = run_python(
        HOOKED
        + "\n    import torch.distributed\n    print('imported', torch.distributed.LOADED)\n",
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "imported True"
    assert out.stderr.count("comminsight-inject: disabled") == 1


# ---------------------------------------------------------------------------- adapter safety


def fake_torch_modules(version="2.13.0", helper=None, split=None):
    torch = types.ModuleType("torch")
    torch.__version__ = version
    c10d = types.ModuleType("torch.distributed.distributed_c10d")
    c10d.Backend, c10d.BackendConfig = str, FakeBackendConfig
    calls = []

    def _new_process_group_helper(
        group_size,
        group_rank,
        global_ranks_in_group,
        backend,
        store,
        group_name,
        backend_options=None,
        timeout=None,
        pg_tag=None,
        device_id=None,
        group_desc=None,
    ):
        calls.append((group_name, backend_options))
        return types.SimpleNamespace(group_name=group_name, rank=lambda: 0, size=lambda: 1), None

    c10d._new_process_group_helper = helper or _new_process_group_helper
    if split is not None:
        c10d.split_group = split
    distributed = types.ModuleType("torch.distributed")
    distributed.distributed_c10d = c10d
    return torch, distributed, c10d, calls


@pytest.fixture
def fake_torch(monkeypatch, tmp_path):
    def install(**kw):
        torch, distributed, c10d, calls = fake_torch_modules(**kw)
        monkeypatch.setitem(sys.modules, "torch", torch)
        monkeypatch.setitem(sys.modules, "torch.distributed", distributed)
        monkeypatch.setitem(sys.modules, "torch.distributed.distributed_c10d", c10d)
        return distributed, c10d, calls

    monkeypatch.setenv("COMMINSIGHT_HOME", str(tmp_path))
    return install


def test_old_torch_is_detected_and_left_alone(fake_torch, capsys):
    distributed, c10d, _ = fake_torch(version="2.1.2")
    original = c10d._new_process_group_helper
    assert torch_adapter.activate(distributed) is None
    assert c10d._new_process_group_helper is original
    assert "torch 2.1.2: unreadable or older than 2.4" in capsys.readouterr().err


def test_unknown_torch_without_the_features_is_handled(fake_torch, capsys):
    def _new_process_group_helper(ranks, name):  # a signature Inject does not know
        return "pg"

    distributed, c10d, _ = fake_torch(version="3.0.0", helper=_new_process_group_helper)
    adapter = torch_adapter.activate(distributed)
    assert adapter is not None and adapter.originals == {}
    assert c10d._new_process_group_helper is _new_process_group_helper
    assert "unknown to Inject: groups not named" in capsys.readouterr().err
    lines = (Path(os.environ["COMMINSIGHT_HOME"]) / "metadata" / "inject").glob("*.jsonl")
    assert list(lines) == []  # nothing recorded: no group was made through Inject


def test_exception_inside_a_wrapper_disables_inject_and_torch_proceeds(
    fake_torch, monkeypatch, capsys
):
    distributed, c10d, calls = fake_torch()
    original = c10d._new_process_group_helper
    assert torch_adapter.activate(distributed) is not None
    wrapper = c10d._new_process_group_helper
    assert wrapper is not original

    def boom(*a, **k):
        raise RuntimeError("planted")

    monkeypatch.setattr(group_naming, "plan_helper", boom)
    pg, _ = wrapper(2, 0, [0, 1], "gloo", None, "3", timeout=5, group_desc="d")
    assert pg.group_name == "3" and calls[-1] == ("3", None)  # the caller's own arguments
    assert c10d._new_process_group_helper is original  # torch's function is back
    pg, _ = wrapper(2, 0, [0, 1], "gloo", None, "4", timeout=5)  # a kept reference passes through
    assert calls[-1] == ("4", None)
    err = capsys.readouterr().err
    assert err.count("comminsight-inject:") == 1
    assert "disabled (preparing _new_process_group_helper: RuntimeError: planted)" in err


def test_exception_while_recording_keeps_torchs_result(fake_torch, monkeypatch, capsys):
    distributed, c10d, calls = fake_torch()
    adapter = torch_adapter.activate(distributed)

    def boom(*a, **k):
        raise OSError("disk gone")

    monkeypatch.setattr(adapter, "record", boom)
    pg, _ = c10d._new_process_group_helper(1, 0, [], "gloo", None, "0", timeout=5)
    assert pg.group_name == "0"
    assert "recording _new_process_group_helper: OSError: disk gone" in capsys.readouterr().err
    assert state.disabled()


def test_torchs_own_exceptions_reach_the_caller_unchanged(fake_torch):
    def _new_process_group_helper(
        group_size,
        group_rank,
        global_ranks_in_group,
        backend,
        store,
        group_name,
        backend_options=None,
    ):
        raise ValueError("The specified group name has already been created")

    distributed, c10d, _ = fake_torch(helper=_new_process_group_helper)
    torch_adapter.activate(distributed)
    with pytest.raises(ValueError, match="already been created"):
        c10d._new_process_group_helper(1, 0, [], "gloo", None, "0")
    assert not state.disabled()


def test_modules_that_imported_the_function_by_name_are_rebound(fake_torch, monkeypatch):
    distributed, c10d, _ = fake_torch()
    user = types.ModuleType("torch.distributed.device_mesh_like")
    user._new_process_group_helper = c10d._new_process_group_helper
    monkeypatch.setitem(sys.modules, user.__name__, user)
    torch_adapter.activate(distributed)
    assert user._new_process_group_helper is c10d._new_process_group_helper
    assert getattr(user._new_process_group_helper, "__comminsight_inject__", False)
    torch_adapter.deactivate_for_tests()
    assert not hasattr(user._new_process_group_helper, "__comminsight_inject__")


def fake_optimizers(with_hook: bool) -> tuple[types.ModuleType, list]:
    """A `torch.optim.optimizer` with (or without) the global step post-hook."""
    optim = types.ModuleType("torch.optim.optimizer")
    hooks = []
    if with_hook:

        def register_optimizer_step_post_hook(hook):
            hooks.append(hook)
            return types.SimpleNamespace(remove=lambda: hooks.remove(hook))

        optim.register_optimizer_step_post_hook = register_optimizer_step_post_hook
    return optim, hooks


def inject_lines() -> list[dict]:
    home = Path(os.environ["COMMINSIGHT_HOME"]) / "metadata" / "inject"
    return [json.loads(x) for p in sorted(home.glob("*.jsonl")) for x in p.read_text().split()]


@pytest.mark.parametrize(
    "flag, with_hook, expect_steps, warning",
    [
        (None, True, True, False),  # the default: on where torch has the hook
        ("0", True, False, False),
        (None, False, False, False),  # the default on a torch without it: off, no word
        ("1", False, False, True),  # asked for and impossible: one warning
    ],
)
def test_step_markers_default_on_where_torch_has_the_hook(
    fake_torch, monkeypatch, capsys, flag, with_hook, expect_steps, warning
):
    if flag is not None:
        monkeypatch.setenv("COMMINSIGHT_INJECT_STEP_MARKERS", flag)
    optim, hooks = fake_optimizers(with_hook)
    monkeypatch.setitem(sys.modules, optim.__name__, optim)  # imported: installed at once
    distributed, c10d, _ = fake_torch()
    adapter = torch_adapter.activate(distributed)
    assert adapter is not None
    assert len(hooks) == int(expect_steps)
    for hook in list(hooks):
        hook(types.SimpleNamespace(), (), {})
    c10d._new_process_group_helper(1, 0, [], "gloo", None, "0", timeout=5)
    lines = inject_lines()
    (process,) = [x for x in lines if x["kind"] == "process"]
    assert process["step_markers"] is expect_steps  # what is really on, not what was asked
    assert [x["index"] for x in lines if x["kind"] == "step"] == ([0] if expect_steps else [])
    err = capsys.readouterr().err
    assert ("no global optimizer step hook" in err) is warning
    assert err.count("comminsight-inject:") == int(warning)


def test_step_markers_wait_for_the_optimizers_and_leave_no_hook_behind(fake_torch, monkeypatch):
    monkeypatch.delitem(sys.modules, "torch.optim.optimizer", raising=False)
    distributed, _, _ = fake_torch()
    adapter = torch_adapter.activate(distributed)
    waiting = [f for f in sys.meta_path if isinstance(f, startup.TorchDistributedHook)]
    assert any(f.targets.get("torch.optim.optimizer") is not None for f in waiting)
    assert adapter.sink.process["step_markers"] is False  # not yet installed
    torch_adapter.deactivate_for_tests()
    assert not any(
        isinstance(f, startup.TorchDistributedHook) and "torch.optim.optimizer" in f.targets
        for f in sys.meta_path
    )


def test_startup_module_imports_nothing_new(inject_wheel, tmp_path):
    """The .pth's module (from the built wheel) may use only what interpreter start loaded."""
    with zipfile.ZipFile(inject_wheel) as z:
        z.extractall(tmp_path / "site")
    code = (
        "import sys; before = set(sys.modules); import comminsight_inject.startup as s; "
        "print(sorted(set(sys.modules) - before))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        check=True,
    )
    assert out.stdout.strip() == "['comminsight_inject', 'comminsight_inject.startup']"
    assert startup.TARGET == "torch.distributed"


def test_the_wheel_reads_the_config_file_with_its_own_copy_of_the_generated_parser(
    inject_wheel, tmp_path
):
    """Inject depends on nothing: its wheel carries the config protocol's generated parser.
    Without site-packages (-S: no comminsight_gen, no msgspec) it still reads the file, takes
    its own keys, skips keys it does not know (a newer release's file) and names a bad value."""
    with zipfile.ZipFile(inject_wheel) as z:
        z.extractall(tmp_path / "site")
    conf = tmp_path / "c.conf"
    conf.write_text(
        "# written by a newer release\nCOMMINSIGHT_FUTURE_KEY=1\n"
        "export COMMINSIGHT_INJECT_DISABLE='yes'\nCOMMINSIGHT_INJECT_STACK_SIGNAL=SIGUSR1\n"
    )
    code = (
        "import sys; from comminsight_inject import settings; "
        "s = settings.load({'COMMINSIGHT_CONF': sys.argv[1]}); "
        "print(s.disable, s.stack_signal, s.stacks, 'comminsight_gen' in sys.modules); "
        "bad = {'COMMINSIGHT_CONF': sys.argv[1], 'COMMINSIGHT_INJECT_STACKS': 'maybe'}\n"
        "try: settings.load(bad)\nexcept settings.SettingsError as e: print(e)"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, str(conf)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "True SIGUSR1 True False"
    assert lines[1].startswith("COMMINSIGHT_INJECT_STACKS='maybe' (environment): expected 1/0")


# ---------------------------------------------------------------------------- the protocol


def metadata_lines() -> list[dict]:
    """Lines Inject wrote on 2xH200 (torch 2.11) and lines written here."""
    results = ROOT / "results" / "2026-11-30-h200x2-inject"
    lines = []
    for path in sorted(results.glob("metadata_*.jsonl")):
        lines += [json.loads(x) for x in path.read_text().splitlines()]
    return lines


def test_metadata_lines_follow_the_inject_metadata_protocol(tmp_path):
    import jsonschema
    import msgspec

    from comminsight_gen.models.inject_metadata_v1 import InjectMetadata

    schema = json.loads(
        (ROOT / "protocols/inject-metadata/v1/inject-metadata.schema.json").read_text()
    )
    sink = MetadataFile(tmp_path, {"inject_version": "0.1.0", "rank": None}, pid=7, host="h")
    sink.write("step", rank=0, optimizer="SGD", index=0)
    sink.close()
    written = [json.loads(x) for x in sink.path.read_text().splitlines()]
    lines = metadata_lines() + written
    assert {x["kind"] for x in lines} == {"process", "group", "step"}
    for line in lines:
        jsonschema.validate(line, schema)
        msgspec.convert(line, InjectMetadata)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**written[0], "naming": "guessed"}, schema)


# ---------------------------------------------------------------------------- split_group


def split_world(parent_options=None, rank=1, group_desc="default_pg"):
    """Fakes of what plan_split reads: the default group bound to cuda:<rank>, its backend."""
    c10d = fake_c10d()
    backend = types.SimpleNamespace(
        options=parent_options or c10d.ProcessGroupNCCL.Options(), comm_split_count=lambda: 3
    )
    default = types.SimpleNamespace(
        rank=lambda: rank,
        group_desc=group_desc,
        bound_device_id=types.SimpleNamespace(type="cuda", index=rank),
        _get_backend=lambda device: backend,
    )
    c10d._get_default_group = lambda: default
    c10d._process_group_name = lambda ranks, use_hashed_name: "h" + "".join(map(str, ranks))
    c10d.get_process_group_ranks = lambda pg: [10, 11, 12, 13]  # parent rank -> global rank
    torch = types.SimpleNamespace(device=lambda kind: kind)
    return c10d, torch, backend


def test_split_plan_names_a_copy_of_the_parents_options_like_torch():
    c10d, torch, parent_backend = split_world()
    nccl_config.set_comm_name(parent_backend.options, "default_pg:0")  # named by Inject
    args = {"split_ranks": [[0, 2], [3, 1]]}
    plan = group_naming.plan_split(c10d, torch, args)
    assert (plan.group_name, plan.group_desc) == ("h13", "default_pg:split:3")
    assert (plan.comm_name, plan.naming) == ("default_pg:split:3:h13", nccl_config.TORCH_OPTION)
    assert (plan.group_rank, plan.group_size, plan.global_ranks) == (0, 2, [11, 13])
    assert args["pg_options"] is not parent_backend.options  # torch's own deep copy
    assert args["pg_options"].config.comm_name == "default_pg:split:3:h13"
    assert parent_backend.options.config.comm_name == "default_pg:0"  # the parent keeps its name


def test_split_plan_keeps_a_users_name_inherited_from_the_parent():
    c10d, torch, parent_backend = split_world()
    parent_backend.options.config.comm_name = "users-parent"
    args = {"split_ranks": [[1]]}
    plan = group_naming.plan_split(c10d, torch, args)
    assert plan.naming == nccl_config.USER_NAMED
    assert "pg_options" not in args  # torch makes the same copy itself


def test_split_plan_uses_the_given_description_and_options():
    c10d, torch, _ = split_world()
    mine = c10d.ProcessGroupNCCL.Options()
    args = {"split_ranks": [[1]], "pg_options": mine, "group_desc": "mesh_tp"}
    plan = group_naming.plan_split(c10d, torch, args)
    assert plan.comm_name == "mesh_tp:h1" and args["pg_options"] is mine
    assert mine.config.comm_name == "mesh_tp:h1"


def test_split_plan_is_none_for_a_rank_in_no_split():
    c10d, torch, _ = split_world(rank=3)
    args = {"split_ranks": [[0, 1]]}
    assert group_naming.plan_split(c10d, torch, args) is None
    assert "pg_options" not in args

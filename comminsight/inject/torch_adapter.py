"""Wrap torch.distributed's group creation, once `torch.distributed` has been imported.

`activate(module)` runs from the import hook (startup.py) right after `torch.distributed`
executed. It checks the torch version and the two functions it wraps (group_naming.py says
why these two), replaces them in `distributed_c10d` and in every loaded torch.distributed
module that imported them by name (device_mesh does), records each group to metadata/, and
installs step markers (on by default, where torch has the global optimizer step hook).

Safety: a wrapper first prepares (names the options), then calls torch's function, then
records. Any exception of Inject's own in preparing or recording turns Inject off with one
warning and puts torch's functions back; torch's call then proceeds with the caller's own
arguments. Exceptions torch raises reach the caller unchanged.
"""

from __future__ import annotations

import inspect
import sys
import threading

from . import __version__, group_naming, settings, startup, state
from .metadata import F, MetadataFile, V, global_rank
from .stack_signal import StackAnnouncer
from .step_markers import StepMarkers

MIN_TORCH = (2, 4)  # group_desc reaches _new_process_group_helper from 2.4 on
TESTED_TORCH = {(2, 11), (2, 13)}  # 2.11 on GPUs (NCCL 2.28.9), 2.13 on CPUs (gloo)
HELPER = "_new_process_group_helper"
SPLIT = "split_group"
HELPER_PARAMS = {"group_size", "group_rank", "global_ranks_in_group", "backend", "group_name"}
HELPER_OPTIONS = "backend_options"
SPLIT_PARAMS = {"parent_pg", "split_ranks", "pg_options", "group_desc"}
OPTIMIZER_MODULE = "torch.optim.optimizer"


def torch_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version string such as '2.11.0+cu130'; None if unreadable."""
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


class Adapter:
    """The wrappers of one process, the originals they replaced, and what they recorded."""

    def __init__(self, torch, c10d, sink: MetadataFile | None):
        self.torch, self.c10d, self.sink = torch, c10d, sink
        self.originals: dict[str, object] = {}
        self.rebound: list[tuple[object, str, object]] = []  # (module, attribute, original)
        self.plans: list[group_naming.Plan] = []  # what tests and the process can inspect
        self.lock = threading.Lock()
        self.markers: StepMarkers | None = None
        self.markers_asked = False  # the user set the flag: a torch without the hook is news
        self.stacks: StackAnnouncer | None = None

    # ---- installing and removing ----

    def install(self) -> list[str]:
        """Wrap what this torch has; returns the names wrapped. Missing pieces are skipped with
        one warning each (older or unknown torch)."""
        wrapped = []
        helper = getattr(self.c10d, HELPER, None)
        params = _params(helper)
        if params is not None and HELPER_PARAMS <= params and HELPER_OPTIONS in params:
            self._replace(HELPER, self._wrap(helper, "helper"))
            wrapped.append(HELPER)
        else:
            state.warn_once(HELPER, f"this torch's {HELPER} is unknown to Inject: groups not named")
        split = getattr(self.c10d, SPLIT, None)
        params = _params(split)
        if params is not None and SPLIT_PARAMS <= params:
            self._replace(SPLIT, self._wrap(split, "split"))
            wrapped.append(SPLIT)
        elif split is not None:
            state.warn_once(SPLIT, f"this torch's {SPLIT} is unknown to Inject: splits not named")
        return wrapped

    def _replace(self, name: str, wrapper) -> None:
        original = getattr(self.c10d, name)
        self.originals[name] = original
        for mod_name, module in list(sys.modules.items()):
            in_distributed = mod_name == "torch.distributed" or mod_name.startswith(
                "torch.distributed."
            )
            if module is None or not in_distributed:
                continue
            if getattr(module, name, None) is original:
                setattr(module, name, wrapper)
                self.rebound.append((module, name, original))

    def uninstall(self) -> None:
        """Put torch's own functions back wherever Inject replaced them."""
        for module, name, original in reversed(self.rebound):
            try:
                setattr(module, name, original)
            except Exception:
                pass
        self.rebound.clear()
        if self.markers is not None:
            self.markers.remove()

    def install_markers(self, optim_module) -> None:
        if self.markers is None or state.disabled():
            return
        if self.markers.install(optim_module):
            # `import torch` imports the optimizers before any group exists, so the process
            # line, written with the file's first line, still says what is really on
            if self.sink is not None:
                self.sink.process[F.STEP_MARKERS] = True
            return
        self.markers = None
        if self.markers_asked:
            state.warn_once("step-markers", "this torch has no global optimizer step hook")

    def fail(self, what: str, error: BaseException) -> None:
        state.disable(f"{what}: {type(error).__name__}: {error}")
        self.uninstall()

    # ---- the wrappers ----

    def _wrap(self, original, kind: str):
        signature = inspect.signature(original)
        adapter = self

        def wrapper(*args, **kwargs):
            if state.disabled():
                return original(*args, **kwargs)
            if adapter.stacks is not None:  # the process joins distributed training here
                adapter.stacks.check()
            try:
                bound = signature.bind(*args, **kwargs)
                if kind == "helper":
                    plan = group_naming.plan_helper(adapter.c10d, bound.arguments)
                else:
                    plan = group_naming.plan_split(adapter.c10d, adapter.torch, bound.arguments)
                call_args, call_kwargs = bound.args, bound.kwargs
            except Exception as e:
                adapter.fail(f"preparing {original.__name__}", e)
                return original(*args, **kwargs)
            result = original(*call_args, **call_kwargs)
            try:
                if plan is not None:
                    adapter.record(plan, result, kind)
            except Exception as e:
                adapter.fail(f"recording {original.__name__}", e)
            return result

        wrapper.__name__ = original.__name__
        wrapper.__qualname__ = getattr(original, "__qualname__", original.__name__)
        wrapper.__doc__ = original.__doc__
        wrapper.__wrapped__ = original
        wrapper.__comminsight_inject__ = True
        return wrapper

    def record(self, plan: group_naming.Plan, result, kind: str) -> None:
        pg = result[0] if kind == "helper" and isinstance(result, tuple) else result
        non_member = getattr(getattr(self.c10d, "GroupMember", None), "NON_GROUP_MEMBER", None)
        if pg is None or pg is non_member or isinstance(pg, int):  # NON_GROUP_MEMBER is -100
            plan.naming = group_naming.NOT_MEMBER
        actual = None
        if plan.naming != group_naming.NOT_MEMBER:
            actual = getattr(pg, "group_name", None)
            plan.group_rank, plan.group_size = pg.rank(), pg.size()
            if not plan.global_ranks:  # the default group: every rank, in order
                plan.global_ranks = list(range(plan.group_size))
        if actual is not None and str(actual) != plan.group_name:
            # torch named the group differently from what Inject computed (an unknown torch):
            # the communicators carry a wrong name, so say so once
            state.warn_once("name-mismatch", f"group {actual} was named {plan.comm_name}")
            plan.reason = f"torch named the group {actual}"
        with self.lock:
            self.plans.append(plan)
            del self.plans[:-4096]  # bounded: only the latest are kept in memory
        if plan.naming == group_naming.UNAVAILABLE:
            state.warn_once("unavailable", f"communicator names not set: {plan.reason}")
        if self.sink is not None and plan.naming != group_naming.NOT_MEMBER:
            self.sink.write(
                V.GROUP,
                **{
                    F.API: plan.api,
                    F.GROUP_NAME: plan.group_name,
                    F.GROUP_DESC: plan.group_desc,
                    F.COMM_NAME: plan.comm_name,
                    F.NAMING: plan.naming,
                    F.REASON: plan.reason,
                    F.RANK: global_rank(),
                    F.GROUP_RANK: plan.group_rank,
                    F.GROUP_SIZE: plan.group_size,
                    F.GLOBAL_RANKS: plan.global_ranks,
                },
            )


def _params(function) -> set[str] | None:
    if function is None:
        return None
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None


_active: Adapter | None = None


def active() -> Adapter | None:
    """The adapter of this process, if Inject is on and torch.distributed was imported."""
    return _active


def activate(distributed, environ: dict[str, str] | None = None) -> Adapter | None:
    """Called once, with the freshly imported `torch.distributed` module."""
    global _active
    if _active is not None or state.disabled():
        return _active
    try:
        conf = settings.load(environ)
    except settings.SettingsError as e:
        state.disable(str(e))
        return None
    if conf.disable:
        return None
    torch = sys.modules.get("torch")
    c10d = getattr(distributed, "distributed_c10d", None)
    if torch is None or c10d is None:  # a torch built without distributed support
        return None
    raw_version = str(getattr(torch, "__version__", "unknown"))
    version = torch_version(raw_version)
    if version is None or version < MIN_TORCH:
        oldest = ".".join(map(str, MIN_TORCH))
        state.disable(f"torch {raw_version}: unreadable or older than {oldest}")
        return None
    process = {
        F.INJECT_VERSION: __version__,
        F.TORCH_VERSION: raw_version,
        F.TORCH_TESTED: version in TESTED_TORCH,
        F.NCCL_BUILD: bool(getattr(c10d, "_NCCL_AVAILABLE", False)),
        F.RANK: global_rank(),
        F.STEP_MARKERS: False,  # until the optimizer hook is in place (install_markers)
    }
    sink = MetadataFile(conf.home, process)
    adapter = Adapter(torch, c10d, sink)
    adapter.stacks = StackAnnouncer(conf, sink)
    try:
        adapter.install()
        if conf.step_markers:
            # torch.distributed is imported halfway through `import torch`: importing the
            # optimizers from here would run torch's own imports out of order, so wait for them
            adapter.markers = StepMarkers(sink)
            adapter.markers_asked = conf.step_markers_asked
            startup.after_import(OPTIMIZER_MODULE, adapter.install_markers)
    except Exception as e:
        adapter.fail("installing", e)
        return None
    _active = adapter
    return adapter


def deactivate_for_tests() -> None:
    global _active
    if _active is not None:
        _active.uninstall()
        _active.markers = None
        forget_pending_markers(_active)
        if _active.stacks is not None:  # only here: a live process keeps its announced handler
            _active.stacks.uninstall()
        if _active.sink is not None:
            _active.sink.close()
    _active = None


def forget_pending_markers(adapter: Adapter) -> None:
    """Drop a still-waiting `after_import` of the optimizers (a test's fake torch never imports
    them): a later real import must not install the hook of an adapter that is gone."""
    for finder in list(sys.meta_path):
        if isinstance(finder, startup.TorchDistributedHook):
            callback = finder.targets.get(OPTIMIZER_MODULE)
            if getattr(callback, "__self__", None) is adapter:
                finder.done(OPTIMIZER_MODULE)

"""What the `.pth` line runs at every interpreter start (`install()`): register a lazy hook,
nothing more.

Cost matters here (every Python process of the environment pays it, torch or not), so this
module imports nothing that start-up has not already loaded (only `os` and `sys`) and reads
no file. The hook is a `sys.meta_path` finder that answers for `torch.distributed` alone:
it lets the other finders locate the real module, runs the real loader, then hands the
executed module to `torch_adapter.activate`, and leaves `sys.meta_path` again. torch itself
is imported by the program, never by Inject.
"""

import os
import sys

TARGET = "torch.distributed"
# config_file_v1.K.INJECT_DISABLE and config_file_v1.TRUE, spelled here rather than imported:
# importing that module at every interpreter start would more than double what Inject costs
# there (tests/test_inject_protocol_names.py holds the copies equal)
DISABLE = "COMMINSIGHT_INJECT_DISABLE"
_TRUE = ("1", "true", "yes", "on")


class TorchDistributedHook:
    """A meta path finder that only watches for a few module names: `torch.distributed`, and
    whatever `after_import` adds (modules the adapter must not import itself while torch is
    still initializing, such as torch.optim.optimizer for step markers)."""

    def __init__(self):
        self.targets = {TARGET: activate}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.targets:
            return None
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = ActivateAfterLoad(spec.loader, self, fullname)
        return spec

    def done(self, fullname):
        """Called after `fullname` executed: its callback, once; the hook leaves when idle."""
        callback = self.targets.pop(fullname, None)
        if not self.targets:
            remove(self)
        return callback


class ActivateAfterLoad:
    """The real loader, followed by the target's callback once the module executed."""

    def __init__(self, loader, hook, fullname):
        self.loader, self.hook, self.fullname = loader, hook, fullname

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # the module keeps the real loader (inspect, pkgutil and linecache ask it for source)
        module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        callback = self.hook.done(self.fullname)
        if callback is not None:
            run_safely(callback, module)

    def __getattr__(self, name):
        return getattr(self.loader, name)


def run_safely(callback, module) -> None:
    """Nothing Inject raises may reach the program's import."""
    try:
        callback(module)
    except Exception as e:
        try:
            from . import state

            state.disable(f"after importing {module.__name__}: {type(e).__name__}: {e}")
        except Exception:
            pass


def after_import(fullname, callback) -> None:
    """Run `callback(module)` once `fullname` is imported (at once if it already is)."""
    loaded = sys.modules.get(fullname)
    if loaded is not None:
        run_safely(callback, loaded)
        return
    hook = next((f for f in sys.meta_path if isinstance(f, TorchDistributedHook)), None)
    if hook is None:
        hook = TorchDistributedHook()
        hook.targets.clear()
        sys.meta_path.insert(0, hook)
    hook.targets[fullname] = callback


def activate(module) -> None:
    """Hand the freshly executed torch.distributed to the adapter."""
    from . import torch_adapter

    torch_adapter.activate(module)


def remove(hook) -> None:
    try:
        sys.meta_path.remove(hook)
    except ValueError:
        pass


def install(environ=None) -> "TorchDistributedHook | None":
    """Register the hook (or act at once if torch.distributed is already imported); None when
    COMMINSIGHT_INJECT_DISABLE is set in the environment."""
    env = os.environ if environ is None else environ
    if env.get(DISABLE, "").strip().lower() in _TRUE:
        return None
    loaded = sys.modules.get(TARGET)
    if loaded is not None:
        run_safely(activate, loaded)
        return None
    for finder in sys.meta_path:
        if isinstance(finder, TorchDistributedHook) and TARGET in finder.targets:
            return finder
    hook = TorchDistributedHook()
    sys.meta_path.insert(0, hook)
    return hook

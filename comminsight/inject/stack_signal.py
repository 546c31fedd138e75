"""Take the stack signal for `stack_dump`, or say why not, in a `stacks` metadata line.

The handler is registered when the process makes its first process group (from the wrapper
Inject puts around torch's group creation), not at interpreter start: only a process that
joins distributed training is one the Agent may ask, and by then the application has
installed whatever handlers it has. The signal is taken only while nothing else holds it:
Python's own table says SIG_DFL *and* the kernel's disposition (sigaction) is the default,
which also catches handlers that C code installed (faulthandler.register, PyTorch's c10 fatal
signal handler, a native library). Otherwise stacks are announced unavailable, with the
reason, and the signal is left alone; nothing else in the process changes.

Every later group creation checks that the handler is still Inject's: an application that
replaced it gets the Agent's signal otherwise, so the line is rewritten as unavailable.
The `stacks` line is the Agent's only permission to send the signal; it carries the
process's start time (/proc/self/stat), which the Agent compares before signalling so that a
recycled pid is never signalled.
"""

from __future__ import annotations

import signal
import threading

from . import state
from .metadata import F, MetadataFile, V
from .settings import STACKS, Settings
from .stack_dump import StackDumper, stack_dir

TURNED_OFF = f"Inject disabled stacks ({STACKS}=0)"
TAKEN = "signal handler taken by the application"


def signal_number(name: str) -> int:
    """SIGUSR1, SIGUSR2 or SIGRTMIN+N as this platform numbers it; ValueError otherwise."""
    if name.startswith("SIGRTMIN+"):
        number = signal.SIGRTMIN + int(name[len("SIGRTMIN+") :])
        if number > signal.SIGRTMAX:
            raise ValueError(f"{name} is past SIGRTMAX ({signal.SIGRTMAX})")
        return int(number)
    return int(getattr(signal, name))


def kernel_handler_installed(signum: int) -> bool | None:
    """Whether the kernel's disposition of `signum` is anything but the default; None when it
    cannot be read (then Python's own table decides). sa_handler is the first member of
    struct sigaction on Linux (glibc and musl, every architecture)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        buffer = ctypes.create_string_buffer(512)  # larger than any struct sigaction
        if libc.sigaction(signum, None, buffer) != 0:
            return None
        handler = ctypes.c_void_p.from_buffer(buffer).value
        return bool(handler)  # SIG_DFL is 0
    except Exception:
        return None


def start_ticks(pid: int | str = "self") -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
        return int(text[text.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


class StackAnnouncer:
    def __init__(self, conf: Settings, sink: MetadataFile):
        self.conf = conf
        self.sink = sink
        self.dumper: StackDumper | None = None
        self.signum: int | None = None
        self.announced: str | None = None  # the state of the last `stacks` line
        self.lock = threading.Lock()

    def check(self) -> None:
        """Register (first call) or verify (later calls); never raises."""
        try:
            with self.lock:
                if self.announced is None:
                    self._register()
                elif self.announced == "available" and not self._still_ours():
                    name = self.conf.stack_signal
                    self._announce(V.UNAVAILABLE, f"{TAKEN}: it replaced Inject's {name} handler")
        except Exception as e:
            state.warn_once("stacks", f"stacks unavailable: {type(e).__name__}: {e}")

    def _still_ours(self) -> bool:
        return self.dumper is not None and signal.getsignal(self.signum) == self.dumper.handler

    def _register(self) -> None:
        name = self.conf.stack_signal
        try:
            self.signum = signal_number(name)
        except (ValueError, AttributeError) as e:
            self._announce("unavailable", f"{name} does not exist here: {e}")
            return
        if not self.conf.stacks:
            self._announce(V.UNAVAILABLE, TURNED_OFF)
            return
        if threading.current_thread() is not threading.main_thread():
            self._announce(
                V.UNAVAILABLE,
                "the first process group was made outside the main thread, where Python "
                "cannot register signal handlers",
            )
            return
        current = signal.getsignal(self.signum)
        if current is not signal.SIG_DFL:
            held = "a handler installed outside Python" if current is None else repr(current)
            self._announce(V.UNAVAILABLE, f"{TAKEN}: {name} already has {held}")
            return
        if kernel_handler_installed(self.signum):
            self._announce(V.UNAVAILABLE, f"{TAKEN}: {name} has a native (C) handler")
            return
        dumper = StackDumper(self.conf.home, self.sink.host, self.signum)
        signal.signal(self.signum, dumper.handler)
        self.dumper = dumper
        self._announce(V.AVAILABLE, "")

    def _announce(self, stacks: str, reason: str) -> None:
        self.announced = stacks
        fields = {
            F.STACKS: stacks,
            F.STACK_SIGNAL_NAME: self.conf.stack_signal,
            F.STACK_DIR: str(stack_dir(self.conf.home)),
            F.REASON: reason,
        }
        if self.signum is not None:
            fields[F.STACK_SIGNAL] = self.signum
        ticks = start_ticks()
        if ticks is not None:
            fields[F.START_TICKS] = ticks
        self.sink.write(V.STACKS, **fields)

    def uninstall(self) -> None:
        """Give the signal back (tests, and Inject turning itself off)."""
        with self.lock:
            if self._still_ours() and threading.current_thread() is threading.main_thread():
                signal.signal(self.signum, signal.SIG_DFL)
            self.dumper = None

"""Keeps the signal dispositions a process had before commkit's native libraries load.

Some libraries that commkit's extension links install process-wide signal handlers from their load-time
constructors: libinfinipath (pulled in by libfabric's PSM provider on Debian/Ubuntu) takes SIGHUP,
SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV and SIGTERM and calls exit() from the handler. In a
multi-threaded training process that is unsafe: a SIGTERM (torchrun stopping a job, a test harness
terminating a rank) runs atexit handlers and static destructors while commkit's and torch's threads
still run, which corrupted the heap and left the rank hung in exit() in our runs; it also replaces
Python's and faulthandler's own handlers and writes "<prog>.80s-<pid>,<host>.btr" files into the
working directory. Loading a library should not change how the process reacts to signals, so
`preserved()` records every signal's disposition before the load and puts back any that changed.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal

# Larger than struct sigaction on every Linux libc (152 bytes with glibc on x86-64 and aarch64); the
# bytes are only saved and handed back to sigaction(), never interpreted.
_SIGACTION_BYTES = 512


def _catchable() -> list[int]:
    sigs = []
    for s in range(1, signal.NSIG):
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        sigs.append(s)
    return sigs


@contextlib.contextmanager
def preserved():
    """Restores, on leaving, every signal disposition that changed inside the block."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        sigaction = libc.sigaction
    except (OSError, AttributeError):  # not a libc we can reach: nothing to guard
        yield
        return
    sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    sigaction.restype = ctypes.c_int
    before = {}
    for s in _catchable():
        buf = ctypes.create_string_buffer(_SIGACTION_BYTES)
        if sigaction(s, None, buf) == 0:
            before[s] = buf
    try:
        yield
    finally:
        for s, old in before.items():
            now = ctypes.create_string_buffer(_SIGACTION_BYTES)
            if sigaction(s, None, now) == 0 and now.raw != old.raw:
                sigaction(s, old, None)

"""How a `bertology` process starts: the console script and `python -m bertology`.

glibc serves every allocation over 32 MiB with fresh pages from mmap and returns them
on free, so a training step pays page faults on each of its largest tensors (the
masked-positions x vocabulary logits and their gradients): measured here, a third of
the step. glibc's documented malloc settings below keep freed memory in the heap for
reuse instead. glibc reads them only when a process starts, so the command re-executes
itself once with them set; settings the user already has win.
"""

import os
import platform
import sys

MALLOC_SETTINGS = {
    "MALLOC_MMAP_THRESHOLD_": str(2**32),  # serve large blocks from the heap, not fresh mmap pages
    "MALLOC_TRIM_THRESHOLD_": str(2**32),  # keep freed heap memory instead of returning it at once
    "MALLOC_TOP_PAD_": str(2**28),  # grow the heap in large steps
}
_RELAUNCHED = "BERTOLOGY_RELAUNCHED"
INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C or SIGTERM (cli.main's)


def relaunch_with_malloc_settings() -> None:
    """Re-execute this process with MALLOC_SETTINGS, once, on Linux with glibc."""
    if os.environ.get(_RELAUNCHED) or not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return
    env = {**MALLOC_SETTINGS, **os.environ, _RELAUNCHED: "1"}
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def main() -> None:
    """Entry point of the `bertology` console script."""
    relaunch_with_malloc_settings()
    from .cli import main as cli_main

    status = cli_main()
    if status == INTERRUPTED:
        # The interrupted command has removed its temporary files and saved what it keeps. The
        # interpreter's teardown is skipped: after a signal stopped a multi-threaded run mid-work (the
        # GloVe trainer's), a native library's teardown aborted now and then ("terminate called without
        # an active exception", SIGABRT after "bertology: interrupted"; 2 in 16 runs of the fuzz tier's
        # "static terminated"), turning a clean stop into a crash.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    main()

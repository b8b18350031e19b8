"""Context managers of the reference API that silence a block's output (``bench_kineto`` uses them)."""

import os
import sys

__all__ = ["empty_suppress", "suppress_stdout_stderr"]


class empty_suppress:  # (lower case: the reference API's name)
    """A context manager that does nothing: the stand-in for :class:`suppress_stdout_stderr` when output is kept."""

    def __enter__(self) -> "empty_suppress":
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


class suppress_stdout_stderr:  # (lower case: the reference API's name)
    """Send everything written to stdout and stderr inside the block to ``os.devnull``.

    Both the Python streams (``sys.stdout``/``sys.stderr``) and the process's file descriptors 1 and 2
    are redirected, so output from C++ and CUDA libraries (the profiler's) is silenced too. Both are
    restored on exit, also when the block raises.
    """

    def __enter__(self) -> "suppress_stdout_stderr":
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        self._devnull = open(os.devnull, "w")  # (closed in __exit__)
        self._saved_fds = [os.dup(1), os.dup(2)]
        os.dup2(self._devnull.fileno(), 1)
        os.dup2(self._devnull.fileno(), 2)
        self._saved_streams = (sys.stdout, sys.stderr)
        sys.stdout = sys.stderr = self._devnull
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._devnull.flush()
        sys.stdout, sys.stderr = self._saved_streams
        for fd, saved in zip((1, 2), self._saved_fds, strict=True):
            os.dup2(saved, fd)
            os.close(saved)
        self._devnull.close()
        return None

"""Which failures the command line reports as one line (``mmspec ...`` and ``python -m mmspec.eval`` alike)."""

from __future__ import annotations

# Failures a user can cause and fix (bad values, paths that cannot be read or created, garbled files): one
# line and exit code 2. Anything else is a bug in mmspec and keeps its traceback.
EXPECTED_ERRORS = (ValueError, OSError)


def error_line(err: BaseException) -> str:
    """The message of an expected failure, naming the path for OS errors ("[Errno 13] ..." says less)."""
    if isinstance(err, OSError) and err.strerror:
        where = f"{err.filename}" + (f" -> {err.filename2}" if err.filename2 else "")
        return f"{where}: {err.strerror}" if err.filename else err.strerror
    return str(err)


__all__ = ["EXPECTED_ERRORS", "error_line"]

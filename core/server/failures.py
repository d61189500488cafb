"""One line that says what failed and where: for the log line a supervisor writes when a task it
owns (a connection, a stream's pipeline, a bridge) ends on an exception it did not expect.

The full traceback goes to the debug log; the line at error level stays one line so that an
operator can grep and count it, and it names the innermost frame so a bug report can start there.
"""

from __future__ import annotations

import os
import traceback


def leaf_exception(exc: BaseException) -> BaseException:
    """The first exception inside nested exception groups (task groups wrap what their tasks raised)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe_failure(exc: BaseException) -> str:
    """``"Type: message (at file.py:123 in func)"`` for the innermost frame of the first leaf."""
    leaf = leaf_exception(exc)
    text = f"{type(leaf).__name__}: {leaf}" if str(leaf) else type(leaf).__name__
    frames = traceback.extract_tb(leaf.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name})"
    return text

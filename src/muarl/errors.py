"""The one error type for a user's mistake, so that the command line can tell it from a bug.

A user's mistake is input that cannot be used: a flag, a config file, a data directory or file, a recorded
run. Library code raises :class:`InputError` (or a subclass) with a message that names the input (file and
line, field or flag) and says what was expected; the ``muarl`` entry point prints that message as one line
and exits 2, the usage-error code, without a traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Input a user gave cannot be used; the message names it and says what was expected."""

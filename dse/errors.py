"""The one error type for bad input.

Everything the user can get wrong (a file, a field, a flag, a value) raises
:class:`InputError` with a one-line message that names the place and the allowed
values. The CLI prints it and exits with status 2; library callers catch it like
any ``ValueError``.
"""

from __future__ import annotations

import difflib


class InputError(ValueError):
    """Bad user input: a one-line message naming the file, field or flag."""


def suggest(word: str, choices, n: int = 3) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest valid names, or ``""``."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=n, cutoff=0.6)
    if not close:
        return ""
    if len(close) == 1:
        return f" (did you mean '{close[0]}'?)"
    return " (did you mean " + ", ".join(f"'{c}'" for c in close) + "?)"

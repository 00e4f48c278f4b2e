"""Errors a user can meet. Each carries a message that names the file or object at fault."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


class InputError(Exception):
    """Input that cannot be read as Kubernetes objects. Exit code 2."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


def did_you_mean(unknown: Iterable[str], known: Iterable[str]) -> str:
    """The hint that follows an "unknown ..." error: ` (did you mean X?)` with the known name
    closest to each unknown one, compared without case (difflib); "" when none is close."""
    by_folded = {name.casefold(): name for name in known}
    close = {
        by_folded[match]
        for name in unknown
        for match in difflib.get_close_matches(name.casefold(), by_folded, n=1, cutoff=0.6)
    }
    return f" (did you mean {' or '.join(sorted(close))}?)" if close else ""

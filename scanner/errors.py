"""Errors a user can meet. Each carries a message that names the file or object at fault."""

from __future__ import annotations

from collections.abc import Sequence


class InputError(Exception):
    """Input that cannot be read as Kubernetes objects. Exit code 2."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))

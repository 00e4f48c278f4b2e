"""A live list asks for its next page while the current one is converted (sources/live.py
`_pages`); the live tests (tests/live) cover the same lists against a real API server."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from gpu_audit.sources.live import _pages


class _ThreePages:
    """A paginated list of three pages, continue tokens t1 and t2."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.asked: list[tuple[str, str]] = []
        self.third_asked = threading.Event()
        self._fail_on = fail_on

    def get(self, path: str, query: list[tuple[str, str]]) -> Any:
        token = dict(query).get("continue", "")
        self.asked.append((path, token))
        if token == self._fail_on:
            raise TimeoutError(f"no answer for {token}")
        if token == "t2":
            self.third_asked.set()
            return {"items": [3], "metadata": {}}
        following = {"": "t1", "t1": "t2"}[token]
        return {"items": [1 if not token else 2], "metadata": {"continue": following}}


def test_the_next_page_is_asked_for_before_the_current_one_is_used() -> None:
    server = _ThreePages()
    pages = _pages(cast(Any, server), "/api/v1/pods", 1)
    assert next(pages)["items"] == [1]
    assert next(pages)["items"] == [2]
    # Page 2 is in the caller's hands and not yet done with: page 3 is already asked for.
    assert server.third_asked.wait(10)
    assert [page["items"] for page in pages] == [[3]]
    assert server.asked == [("/api/v1/pods", ""), ("/api/v1/pods", "t1"), ("/api/v1/pods", "t2")]


def test_a_failure_of_the_next_page_reaches_the_caller_after_the_pages_before_it() -> None:
    pages = _pages(cast(Any, _ThreePages(fail_on="t2")), "/api/v1/pods", 1)
    assert [next(pages)["items"], next(pages)["items"]] == [[1], [2]]
    with pytest.raises(TimeoutError, match="no answer for t2"):
        next(pages)


def test_a_list_of_one_page_asks_once() -> None:
    class _OnePage:
        asked = 0

        def get(self, path: str, query: list[tuple[str, str]]) -> Any:
            self.asked += 1
            return {"items": ["only"], "metadata": {"continue": ""}}

    server = _OnePage()
    assert [page["items"] for page in _pages(cast(Any, server), "/api/v1/nodes", 500)] == [["only"]]
    assert server.asked == 1

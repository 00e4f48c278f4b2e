"""A live list asks for its next page while the current one is converted, and decodes each
object of a page as it converts it (sources/live.py `_pages`, `_list_kind`); the live tests
(tests/live) cover the same lists against a real API server."""

from __future__ import annotations

import threading
from typing import Any, cast

import msgspec
import pytest

from gpu_audit.k8s.kinds import KNOWN_KINDS
from gpu_audit.sources.live import (
    _PAGE_DECODER,
    ListOptions,
    _Collection,
    _list_kind,
    _Page,
    _pages,
)


def _page(items: list[Any], token: str = "") -> _Page:
    """A page as the client decodes it: its items still JSON text."""
    raw = [msgspec.Raw(msgspec.json.encode(item)) for item in items]
    return _Page(items=raw, metadata={"continue": token} if token else {})


def _items(page: _Page) -> list[Any]:
    return [msgspec.json.decode(item) for item in page.items or ()]


class _ThreePages:
    """A paginated list of three pages, continue tokens t1 and t2."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.asked: list[tuple[str, str]] = []
        self.third_asked = threading.Event()
        self._fail_on = fail_on

    def page(self, path: str, query: list[tuple[str, str]]) -> _Page:
        token = dict(query).get("continue", "")
        self.asked.append((path, token))
        if token == self._fail_on:
            raise TimeoutError(f"no answer for {token}")
        if token == "t2":
            self.third_asked.set()
            return _page([3])
        following = {"": "t1", "t1": "t2"}[token]
        return _page([1 if not token else 2], following)


def test_the_next_page_is_asked_for_before_the_current_one_is_used() -> None:
    server = _ThreePages()
    pages = _pages(cast(Any, server), "/api/v1/pods", 1)
    assert _items(next(pages)) == [1]
    assert _items(next(pages)) == [2]
    # Page 2 is in the caller's hands and not yet done with: page 3 is already asked for.
    assert server.third_asked.wait(10)
    assert [_items(page) for page in pages] == [[3]]
    assert server.asked == [("/api/v1/pods", ""), ("/api/v1/pods", "t1"), ("/api/v1/pods", "t2")]


def test_a_failure_of_the_next_page_reaches_the_caller_after_the_pages_before_it() -> None:
    pages = _pages(cast(Any, _ThreePages(fail_on="t2")), "/api/v1/pods", 1)
    assert [_items(next(pages)), _items(next(pages))] == [[1], [2]]
    with pytest.raises(TimeoutError, match="no answer for t2"):
        next(pages)


def test_a_list_of_one_page_asks_once() -> None:
    class _OnePage:
        asked = 0

        def page(self, path: str, query: list[tuple[str, str]]) -> _Page:
            self.asked += 1
            return _page(["only"])

    server = _OnePage()
    assert [_items(p) for p in _pages(cast(Any, server), "/api/v1/nodes", 500)] == [["only"]]
    assert server.asked == 1


class _PodPages:
    """Two pages of pods; the text of the second page's object is `second`."""

    def __init__(self, second: bytes) -> None:
        self._second = second

    def page(self, path: str, query: list[tuple[str, str]]) -> _Page:
        if dict(query).get("continue"):
            return _Page(items=[msgspec.Raw(self._second)], metadata={})
        first = {"metadata": {"name": "a", "namespace": "ml"}, "spec": {"nodeName": "n1"}}
        return _page([first], "t1")


def _list_pods(client: _PodPages) -> _Collection:
    out = _Collection()
    _list_kind(cast(Any, client), KNOWN_KINDS["Pod"], "v1", ListOptions(), out, None)
    return out


def test_each_object_of_a_page_becomes_a_resource() -> None:
    out = _list_pods(_PodPages(b'{"metadata": {"name": "b", "namespace": "ml"}, "spec": {}}'))
    assert [(r.ref.name, r.raw["kind"], r.raw["apiVersion"]) for r in out.resources] == [
        ("a", "Pod", "v1"),
        ("b", "Pod", "v1"),
    ]
    assert out.available == {"Pod"} and out.gaps == []


def test_an_object_that_is_not_utf8_is_a_gap_of_its_kind() -> None:
    """msgspec checks a page's syntax as it splits it into objects, but not that its strings
    are UTF-8 (as `_PAGE_DECODER` shows below): that shows when the object is decoded. The
    page was read whole, so no retry would change it: the kind is not assessed, and the
    report says why, instead of the scan ending with a traceback."""
    text = b'{"metadata": {"name": "b\xff", "namespace": "ml"}}'
    assert _PAGE_DECODER.decode(b'{"items": [%s]}' % text).items is not None
    out = _list_pods(_PodPages(text))
    assert out.resources == [] and out.available == set()
    [gap] = out.gaps
    assert gap.type == "Pod"
    assert gap.reason.startswith("the API server sent a Pod that is not JSON (")
    assert gap.reason.endswith(") listing pods")

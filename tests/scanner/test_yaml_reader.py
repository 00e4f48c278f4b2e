"""The YAML reader (scanner/sources/documents.py, _YamlReader) builds each document by recursive
descent over libyaml's events: a problem found deep in a document is worded from the
collections it is found in (its field path, or the line and column of the event it is found
at), the value count runs on across documents, and plain scalars resolved once are reused."""

from __future__ import annotations

import io

import pytest

from gpu_audit.sources.documents import DocumentError, LimitError, Limits, Source, Tally, parse


def read(text: str, limits: Limits | None = None) -> tuple[list[object], Tally]:
    """Each document of `text`, or the message of its DocumentError; and the tally after."""
    tally = Tally()
    source = Source("in.yaml", io.BytesIO(text.encode()), 1 << 20, "too big")
    documents: list[object] = [
        str(document) if isinstance(document, DocumentError) else document
        for _, document in parse(source, False, limits or Limits(), tally)
    ]
    return documents, tally


@pytest.mark.parametrize(
    ("text", "limits", "expected"),
    [
        # Through mappings and lists: each list names the item being read.
        ("x:\n  a:\n  - b: [1, .nan]\n", Limits(), "x.a[0].b[1]: nan is not a valid number"),
        # Through a merge key's value.
        (
            "base: &b {a: 1}\nx:\n  <<: [*b, {c: [.inf]}]\n",
            Limits(),
            "x.<<[1].c[0]: inf is not a valid number",
        ),
        # A key being read is no part of the path.
        (
            "x:\n  y:\n    1.0e+400: a\n",
            Limits(),
            "x.y: the number 1.0e+400 is out of range (more than a 64-bit float holds)",
        ),
        # A collection too deep is named by where it would go, not by its own items.
        ("a: [{b: [1]}]\n", Limits(depth=3), "a[0].b: nested deeper than 3 levels"),
        ("x: &k [1, [*k]]\n", Limits(), "x[1][0]: YAML alias refers to itself"),
        # An alias whose copy would nest too deep where it is used.
        ("a: &a [[1]]\nb: [*a]\n", Limits(depth=3), "b[0]: nested deeper than 3 levels"),
    ],
)
def test_a_problem_deep_in_a_document_names_its_field(
    text: str, limits: Limits, expected: str
) -> None:
    assert read(text, limits)[0] == [expected]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A merge value is judged when it ends: a block list ends at the next key.
        ("x:\n  <<:\n  - a\n  - b\n  y: 1\n", "line 5 column 3"),
        ("x:\n  <<: {a: 1}\n  <<: [c]\n", "line 3 column 9"),  # a flow list at its `]`
        ("x:\n  <<: [{a: 1}, b]\n", "line 2 column 17"),
        ("x:\n  <<: c\n", "line 2 column 7"),  # a scalar where it is
    ],
)
def test_a_merge_value_that_is_no_mapping_is_shown_where_it_ends(text: str, expected: str) -> None:
    problem = f"invalid YAML at {expected}: expected a mapping or list of mappings for merging"
    assert read(text)[0] == [problem]


def test_values_are_counted_across_documents_up_to_a_problem() -> None:
    # The first document holds 7 values up to its problem (the mapping, `a`, the list and 4
    # items), the rest of it is skipped uncounted; the second holds 3.
    text = "a: [1, 2, 3, .nan, 5, 6]\n---\nb: 1\n"
    documents, tally = read(text, Limits(values=10))
    assert documents == ["a[3]: nan is not a valid number", {"b": 1}]
    assert tally.values == 10
    with pytest.raises(LimitError, match=r"^in\.yaml: document 2: more than 9 values"):
        read(text, Limits(values=9))


def test_plain_scalars_resolved_once_resolve_alike_in_later_documents() -> None:
    text = (
        "a: 0777\nb: '0777'\nc: yes\nd: <<\ne: '1:30'\n---\n"
        "a: 0777\nb: yes\nc: 1:30\n<<: {d: 1}\n---\n"
        "- 0777\n- '0777'\n- <<\n"
    )
    assert read(text)[0] == [
        {"a": 511, "b": "0777", "c": True, "d": "<<", "e": "1:30"},
        {"d": 1, "a": 511, "b": True, "c": 90},
        [511, "0777", "<<"],
    ]

"""The canonical JSON text of a document, written fast.

The text is defined as `json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False)`
plus a final newline (`reference_json`). CPython writes that with its pure-Python encoder: an
`indent` turns its C encoder off (json.encoder.JSONEncoder.iterencode), which made this the
largest part of rendering a big report. `canonical_json` writes the same text in two fast
steps: the C encoder writes the document compactly (no indent: same keys, order, numbers,
strings and errors, because both encoders share their rules), then msgspec.json.format indents
that text, copying every number and string as it is. Where the two steps cannot give the
reference text, they raise, and the reference encoder writes the document instead, whose
text or error is then the result:

- NaN and infinities (written `NaN`, `Infinity`, which are not JSON: allow_nan=False raises);
- a lone surrogate in a string (msgspec cannot encode it as UTF-8);
- nesting near the recursion limit, and every document json.dumps refuses (a TypeError for an
  object it cannot write or keys it cannot sort, a ValueError for a circular reference or an
  int too long for str()), which then raises the reference's own error.

The one difference left is a list or tuple subclass whose __iter__ yields other items than it
holds: the C encoder writes what it holds. No gpu-audit document holds one.
tests/test_json_text.py compares the two texts on generated documents and on every document
the commands write for the fixtures.
"""

from __future__ import annotations

import json

import msgspec


def reference_json(document: object) -> str:
    """The canonical text by its definition (slow for big documents: see the module)."""
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def canonical_json(document: object) -> str:
    """`reference_json(document)`, written by the C encoder and msgspec when they can."""
    try:
        compact = json.dumps(
            document, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
        return msgspec.json.format(compact, indent=2) + "\n"
    except (TypeError, ValueError, RecursionError, msgspec.MsgspecError):
        return reference_json(document)

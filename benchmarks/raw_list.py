"""The floor of a live scan: list the given kinds from the API server, paginated as gpu-audit
lists them (500 per page, 4 kinds at a time), decode every page and keep nothing.

Usage: raw_list.py SERVER CA_FILE TOKEN_FILE PATH... (collection paths such as /api/v1/pods).
Prints {"objects": N, "served": [PATH...]} on stdout; a path the server does not serve (404,
e.g. a CRD that is not installed) is left out of "served".
"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, urlsplit

PAGE_SIZE = 500
WORKERS = 4


def list_all(server: str, context: ssl.SSLContext, token: str, path: str) -> int | None:
    """How many objects the collection holds; None when the server does not serve it."""
    conn = http.client.HTTPSConnection(urlsplit(server).netloc, context=context, timeout=120)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    count, token_ = 0, ""
    try:
        while True:
            query = f"?limit={PAGE_SIZE}" + (f"&continue={quote(token_)}" if token_ else "")
            conn.request("GET", path + query, headers=headers)
            response = conn.getresponse()
            body = response.read()
            if response.status == 404:
                return None
            if response.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {response.status}: {body[:200]!r}")
            page = json.loads(body)
            count += len(page.get("items") or [])
            token_ = (page.get("metadata") or {}).get("continue") or ""
            if not token_:
                return count
    finally:
        conn.close()


def main() -> None:
    server, ca_file, token_file, *paths = sys.argv[1:]
    context = ssl.create_default_context(cafile=ca_file)
    token = Path(token_file).read_text().strip()
    with ThreadPoolExecutor(WORKERS) as pool:
        counts = list(pool.map(lambda p: list_all(server, context, token, p), paths))
    served = [path for path, count in zip(paths, counts, strict=True) if count is not None]
    print(json.dumps({"objects": sum(c for c in counts if c is not None), "served": served}))


if __name__ == "__main__":
    main()

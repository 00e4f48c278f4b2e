"""Live input: list what the enabled checks read from the Kubernetes API, read-only.

The only module that talks to a cluster. It keeps raw JSON (no typed models: several times
slower, and they change key case), pages every list, lists kinds concurrently with a bound,
retries throttling and server errors under one overall deadline, and turns a 403 or a missing
CRD into a recorded gap instead of an abort. Secrets are never listed.

The deadline (`ListOptions.timeout`) is a real one: urllib3 retries nothing (only `_Client`
does, and only while time is left), each request's connect and read timeouts are cut to the
time left, and each request runs in a thread the caller waits for only until the deadline, so
that neither a silent server nor one that trickles a byte a second (which no per-read timeout
catches) holds the scan past it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import msgspec
import yaml

from gpu_audit.k8s.kinds import (
    BUILTIN_GROUPS,
    KNOWN_KINDS,
    KindInfo,
)
from gpu_audit.model import ObjRef, Resource, SourceLocation
from gpu_audit.redact import redact_text, sanitize
from gpu_audit.sharing import SharedParts
from gpu_audit.snapshot import (
    API_NOT_SERVED,
    CRD_NOT_INSTALLED,
    CollectionGap,
    Snapshot,
    SourceInfo,
)

NEVER_LISTED = frozenset({"Secret"})
RETRYABLE = frozenset({429, 500, 502, 503, 504})
MAX_LIST_RESTARTS = 3
CONNECT_TIMEOUT_S = 10.0  # TCP and TLS handshake of one request, at most
READ_TIMEOUT_S = 30.0  # silence within one request's answer, at most
# The first request (/version) is retried this long at most, not the whole --timeout: a server
# that refuses or drops connections for this long is not there (a wrong context, a stopped
# cluster); kubectl does not retry at all. An apiserver restarting under a CronJob is back
# within it.
FIRST_CONTACT_S = 30.0
LIVE_SOURCE = SourceLocation("")


class LiveError(Exception):
    """The cluster cannot be scanned at all: unreachable, or the credentials are rejected."""


class ConfigError(LiveError):
    """The connection cannot even be configured: no kubeconfig, a --kubeconfig file that does
    not exist or does not parse, an unknown --context, no in-cluster service account. A usage
    problem (the command line exits 2), not a cluster that could not be read."""


@dataclass(frozen=True, slots=True)
class Connection:
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool | None = None  # None: auto-detect a pod's service account


@dataclass(frozen=True, slots=True)
class ListOptions:
    namespace: str | None = None  # None: all namespaces
    page_size: int = 500
    timeout: float = 120.0  # overall deadline for the whole collection, in seconds
    workers: int = 4


Progress = Callable[[str, int], None]  # (resource type, objects so far)


@dataclass(frozen=True, slots=True)
class _Failure:
    """A retryable failure of one request."""

    reason: str
    retry_after: float | None = None


class _HttpError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    reason: str
    headers: Any
    body: bytes


class _Exchange(threading.Thread):
    """One request and its whole answer, in a daemon thread that the caller waits for only
    until the deadline. Per-read timeouts cannot end a server that sends a byte a second, and
    nothing bounds a name lookup; a thread can be left behind instead. When the caller gives up
    it shuts down the socket of an answer being read (which ends the thread at once); a thread
    still connecting or reading headers ends at its own timeouts (or, for headers trickled a
    byte at a time, when the server stops), and a daemon thread never delays the exit."""

    def __init__(self, send: Callable[[], Any]) -> None:
        super().__init__(name="gpu-audit-request", daemon=True)
        self._send = send
        self._response: Any = None  # urllib3's, once the headers are in
        self._reply: _Reply | None = None
        self._error: Exception | None = None

    def run(self) -> None:
        try:
            response = self._send()
            self._response = response.response
            self._reply = _Reply(
                response.status, str(response.reason), response.headers, response.read()
            )
        except Exception as exc:  # raised again in the caller's thread by `reply`
            self._error = exc

    def reply(self, deadline: float) -> _Reply | None:
        """The answer, None if it was not complete by the deadline, or the request's error."""
        self.join(max(0.0, deadline - time.monotonic()))
        if self.is_alive():
            with contextlib.suppress(AttributeError, ValueError, RuntimeError, OSError):
                self._response.shutdown()  # urllib3 >= 2.3; None before the headers
            return None
        if self._error is not None:
            raise self._error
        return self._reply


class _Page(msgspec.Struct):
    """A list page whose items are still JSON text, checked for syntax only: each is decoded
    as it is converted (_list_kind), so that a page's objects are never all held at once,
    and each is used while it is fresh in the processor's cache (at 20,000 pods, the load
    went from 3.0-3.25 to 2.8-3.0 s and the scan from 5.7-5.9 to 5.3-5.4 s)."""

    items: list[msgspec.Raw] | None = None
    metadata: dict[str, Any] | None = None


_PAGE_DECODER = msgspec.json.Decoder(_Page)


@dataclass
class _Client:
    """GET/POST raw JSON through the kubernetes client's configured transport and auth."""

    api: Any
    deadline: float

    def _send(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, remaining: float
    ) -> _Reply | None:
        """One request, its connect and read timeouts cut to the time left; None when no
        complete answer came by the deadline."""
        # kubernetes >= 35 (openapi-generator 7): param_serialize builds the URL and auth
        # headers, call_api sends it and returns the response without raising on an error
        # status.
        _, url, headers, data, _ = self.api.param_serialize(
            method,
            path,
            query_params=query,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        exchange = _Exchange(
            functools.partial(
                self.api.call_api,
                method,
                url,
                header_params=headers,
                body=data,
                _request_timeout=(
                    min(CONNECT_TIMEOUT_S, remaining),
                    min(READ_TIMEOUT_S, remaining),
                ),
            )
        )
        exchange.start()
        return exchange.reply(self.deadline)

    def _call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: Any,
        decode: Callable[[bytes], Any] = msgspec.json.decode,
    ) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        attempt = 0
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out ({method} {path})")
            try:
                reply = self._send(method, path, query, body, remaining)
                if reply is not None and 200 <= reply.status <= 299:
                    # msgspec reads a list page in half the time json.loads takes; the API
                    # server writes UTF-8 JSON with no duplicate key or NaN, so the two agree.
                    return decode(reply.body)
            except ApiException as exc:  # status 0: TLS failure, or a request it cannot build
                raise _HttpError(exc.status or 0, str(exc.reason).splitlines()[-1]) from None
            except (Urllib3Error, OSError, msgspec.DecodeError) as exc:
                failure = _Failure(type(exc).__name__)
            else:
                if reply is None:
                    raise TimeoutError(f"no complete answer by the deadline ({method} {path})")
                if reply.status not in RETRYABLE:
                    raise _HttpError(reply.status, reply.reason)
                failure = _Failure(f"HTTP {reply.status}", _retry_after(reply.headers))
            attempt += 1
            pause = (
                failure.retry_after
                if failure.retry_after is not None
                else min(0.2 * 2**attempt, 5.0)
            )
            if time.monotonic() + pause >= self.deadline:
                raise TimeoutError(
                    f"gave up after {attempt} attempts ({failure.reason}) on {method} {path}"
                )
            time.sleep(pause)

    def get(self, path: str, query: Iterable[tuple[str, str]] = ()) -> Any:
        return self._call("GET", path, list(query), None)

    def page(self, path: str, query: Iterable[tuple[str, str]]) -> _Page:
        """A page of a list (query: its limit and continue token)."""
        page: _Page = self._call("GET", path, list(query), None, _PAGE_DECODER.decode)
        return page

    def post(self, path: str, body: Any) -> Any:
        return self._call("POST", path, [], body)


def _retry_after(headers: Any) -> float | None:
    value = (headers or {}).get("Retry-After") if hasattr(headers, "get") else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _api_client(connection: Connection) -> tuple[Any, str, str]:
    """A configured ApiClient, the server URL and a context name."""
    import os

    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    in_cluster = connection.in_cluster
    if in_cluster is None:
        in_cluster = (
            connection.kubeconfig is None
            and "KUBECONFIG" not in os.environ
            and "KUBERNETES_SERVICE_HOST" in os.environ
        )
    try:
        if in_cluster:
            loader = config.incluster_config.InClusterConfigLoader(
                token_filename=config.incluster_config.SERVICE_TOKEN_FILENAME,
                cert_filename=config.incluster_config.SERVICE_CERT_FILENAME,
            )
            loader.load_and_set(configuration)
            context = "in-cluster"
        else:
            config.load_kube_config(
                config_file=connection.kubeconfig,
                context=connection.context,
                client_configuration=configuration,
            )
            _, active = config.list_kube_config_contexts(config_file=connection.kubeconfig)
            context = connection.context or (active or {}).get("name", "")
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        where = (
            "in-cluster service account" if in_cluster else (connection.kubeconfig or "kubeconfig")
        )
        raise ConfigError(f"cannot load {where}: {exc}") from None
    # urllib3 would retry a timed-out GET three times, each with the whole timeout: _Client
    # retries instead, and only while the deadline leaves time.
    configuration.retries = False
    # The server URL is shown in messages and the report: without userinfo, if it has any.
    return client.ApiClient(configuration), redact_text(configuration.host), context


def kubeconfig_contexts(kubeconfig: str | None) -> list[str]:
    """The context names of a kubeconfig file (default: $KUBECONFIG, ~/.kube/config), in the
    file's order (`scan --all-contexts`). Raises ConfigError when it cannot be read."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot load {kubeconfig or 'kubeconfig'}: {exc}") from None
    return [str(c["name"]) for c in contexts or [] if isinstance(c, dict) and c.get("name")]


@dataclass
class _Collection:
    resources: list[Resource] = field(default_factory=list)
    available: set[str] = field(default_factory=set)
    gaps: list[CollectionGap] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    count: int = 0
    parts: SharedParts = field(default_factory=SharedParts)


def _resource_name(info: KindInfo) -> str:
    return info.plural if not info.group else f"{info.plural}.{info.group}"


def _served_versions(client: _Client, groups: set[str]) -> dict[str, dict[str, set[str]]]:
    """For each wanted API group: version -> resource plurals the server serves."""
    served: dict[str, dict[str, set[str]]] = {}
    if "" in groups:
        core = client.get("/api/v1")
        served[""] = {"v1": {r["name"] for r in core.get("resources", [])}}
    wanted = groups - {""}
    if not wanted:
        return served
    for group in client.get("/apis").get("groups", []):
        name = group.get("name", "")
        if name not in wanted:
            continue
        versions: dict[str, set[str]] = {}
        for version in group.get("versions", []):
            gv = version.get("groupVersion", "")
            listing = client.get(f"/apis/{gv}")
            versions[version.get("version", "")] = {r["name"] for r in listing.get("resources", [])}
        served[name] = versions
    return served


def _pick_version(info: KindInfo, served: dict[str, dict[str, set[str]]]) -> str | None:
    versions = served.get(info.group, {})
    for version in (*info.versions, *sorted(versions)):
        if info.plural in versions.get(version, set()):
            return version
    return None


def _list_path(info: KindInfo, version: str, namespace: str | None) -> str:
    prefix = f"/api/{version}" if not info.group else f"/apis/{info.group}/{version}"
    if info.namespaced and namespace:
        return f"{prefix}/namespaces/{namespace}/{info.plural}"
    return f"{prefix}/{info.plural}"


def _list_kind(
    client: _Client,
    info: KindInfo,
    version: str,
    options: ListOptions,
    out: _Collection,
    progress: Progress | None,
) -> None:
    api_version = version if not info.group else f"{info.group}/{version}"
    path = _list_path(info, version, options.namespace)
    for _restart in range(MAX_LIST_RESTARTS + 1):
        items: list[Resource] = []
        try:
            for page in _pages(client, path, options.page_size):
                page_items = page.items or ()
                items.extend(
                    _to_resource(_decoded(item, info), info, api_version, out.parts)
                    for item in page_items
                )
                with out.lock:
                    out.count += len(page_items)
                if progress:
                    progress(info.type, out.count)
        except _HttpError as exc:
            if exc.status == 410:  # the continue token expired: list again from the start
                with out.lock:
                    out.count -= len(items)
                continue
            reason = (
                f"forbidden: list {_resource_name(info)}"
                if exc.status == 403
                else f"HTTP {exc.status} listing {_resource_name(info)}: {exc}"
            )
            with out.lock:
                out.gaps.append(CollectionGap(info.type, reason))
            return
        except (TimeoutError, _BadObjectError) as exc:
            with out.lock:
                out.gaps.append(CollectionGap(info.type, f"{exc} listing {_resource_name(info)}"))
            return
        with out.lock:
            out.resources.extend(items)
            out.available.add(info.type)
        return
    with out.lock:
        out.gaps.append(
            CollectionGap(info.type, f"list of {_resource_name(info)} kept expiring (410 Gone)")
        )


class _BadObjectError(Exception):
    """A listed object that is not valid JSON: the page's syntax is checked, not its text."""


_ITEM_DECODER = msgspec.json.Decoder()


def _decoded(item: msgspec.Raw, info: KindInfo) -> Any:
    try:
        return _ITEM_DECODER.decode(item)
    except msgspec.DecodeError as exc:  # a string that is not UTF-8
        raise _BadObjectError(
            f"the API server sent a {info.kind} that is not JSON ({exc})"
        ) from None


def _pages(client: _Client, path: str, page_size: int) -> Iterator[_Page]:
    """The pages of a paginated list, each next one asked for as soon as its continue token
    is known: the API server reads and encodes page N+1 while this process converts page N
    (at 20,000 pods, 0.4-1.3 s less of a 7.7-9.4 s scan). At most two raw pages are held."""

    def ask(fetcher: ThreadPoolExecutor, token: str) -> Future[_Page]:
        query = [("limit", str(page_size))]
        if token:
            query.append(("continue", token))
        return fetcher.submit(client.page, path, query)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpu-audit-page") as fetcher:
        pending = ask(fetcher, "")
        while True:
            page = pending.result()
            token = (page.metadata or {}).get("continue") or ""
            if token:
                pending = ask(fetcher, token)
            yield page
            if not token:
                return


def _to_resource(
    item: dict[str, Any], info: KindInfo, api_version: str, parts: SharedParts
) -> Resource:
    # List items carry neither apiVersion nor kind; put them back so objects look as in a file.
    item["apiVersion"] = api_version
    item["kind"] = info.kind
    metadata = item.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "") if info.namespaced else ""
    ref = ObjRef(info.type, namespace, str(metadata.get("name", "")))
    return Resource(ref, api_version, sanitize(item, parts), LIVE_SOURCE)


def _identity(client: _Client) -> dict[str, Any]:
    try:
        review = client.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    except (_HttpError, TimeoutError):
        return {"username": None, "groups": []}
    user = (review.get("status") or {}).get("userInfo") or {}
    return {"username": user.get("username"), "groups": sorted(user.get("groups") or [])}


def _connect(api: Any, host: str, deadline: float) -> tuple[_Client, str]:
    client = _Client(api, deadline)
    first_contact = _Client(api, min(deadline, time.monotonic() + FIRST_CONTACT_S))
    try:
        version = first_contact.get("/version")
    except _HttpError as exc:
        if exc.status in (401, 403):
            raise LiveError(
                f"the cluster at {host} rejected the credentials (HTTP {exc.status})"
            ) from None
        raise LiveError(f"the cluster at {host} answered HTTP {exc.status} to /version") from None
    except TimeoutError as exc:
        raise LiveError(f"cannot reach the cluster at {host}: {exc}") from None
    return client, str(version.get("gitVersion", ""))


def collect(
    types: Iterable[str],
    connection: Connection = Connection(),
    options: ListOptions = ListOptions(),
    progress: Progress | None = None,
) -> Snapshot:
    """List every wanted resource type into a snapshot; raise LiveError if none can be."""
    deadline = time.monotonic() + options.timeout
    api, host, context = _api_client(connection)
    client, server_version = _connect(api, host, deadline)
    out = _Collection()
    wanted: list[KindInfo] = []
    for type_ in sorted(set(types) - NEVER_LISTED):
        info = KNOWN_KINDS.get(type_)
        if info is None:
            out.gaps.append(CollectionGap(type_, f"unknown resource type {type_}"))
        else:
            wanted.append(info)
    try:
        served = _served_versions(client, {i.group for i in wanted})
    except (_HttpError, TimeoutError) as exc:
        raise LiveError(f"API discovery failed on {host}: {exc}") from None
    listable: list[tuple[KindInfo, str]] = []
    for info in wanted:
        version = _pick_version(info, served)
        if version is not None:
            listable.append((info, version))
        elif info.group in BUILTIN_GROUPS:
            out.gaps.append(CollectionGap(info.type, f"{API_NOT_SERVED} {_resource_name(info)}"))
        else:
            out.gaps.append(CollectionGap(info.type, f"{CRD_NOT_INSTALLED} {_resource_name(info)}"))
    with ThreadPoolExecutor(max_workers=max(1, options.workers)) as pool:
        for future in [
            pool.submit(_list_kind, client, i, v, options, out, progress) for i, v in listable
        ]:
            future.result()
    forbidden = sorted(g.reason for g in out.gaps if g.reason.startswith("forbidden"))
    details = {
        "server": host,
        "context": context,
        "server_version": server_version,
        "namespace": options.namespace,
        "identity": _identity(client),
        "missing_permissions": forbidden,
    }
    return Snapshot(
        out.resources,
        available=out.available,
        gaps=out.gaps,
        source=SourceInfo("live", (context or host,), (), details),
    )

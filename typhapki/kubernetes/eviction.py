"""Restart this node's Typha through the Kubernetes eviction API, so that the
PodDisruptionBudget decides: at most `maxUnavailable` Typha pods of the cluster are
down at once, however many nodes renewed in the same Puppet interval.

Two requests, both over one bounded budget of time (`timeout` seconds in all, however
the server dribbles its bytes):
- `GET /api/v1/namespaces/NS/pods?labelSelector=k8s-app=calico-typha&fieldSelector=
  spec.nodeName=NODE`: the Typha pods on this node (`k8s-app=calico-typha-tls`, the TLS
  Typha's, in the live switch's stages: typhapki/kubernetes/typhatarget.py);
- `POST /api/v1/namespaces/NS/pods/POD/eviction` with a policy/v1 `Eviction`: 201 (or
  200) evicted; 429 the budget refuses now (RestartDeferredError, exit 6); 404 the pod
  is gone already.

Only a pod that runs on this node is ever evicted: a listed pod whose `spec.nodeName`
is not this node (or missing), of another namespace, or without Typha's label means the
selectors were not applied, and nothing is evicted. That, and everything else (no
connection, a TLS certificate not from the kubeconfig's CA, 401/403, 5xx, an answer
that is not the API's JSON, over MAX_ANSWER bytes or of the wrong types) is a
KubeApiError (exit 7), one line, server text escaped; the marker stays. Only the standard library
speaks HTTP here, as for cfssl (typhapki/pki/signers/cfssl.py).
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import time
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from typhapki.deadline import MAX_JSON_DEPTH, DeadlineSocket, json_depth, time_left
from typhapki.errors import KubeApiError, RestartDeferredError, UsageError
from typhapki.kubernetes.kubeconfig import KubeAccess
from typhapki.kubernetes.typhatarget import typha_target
from typhapki.pki.signers.cfssl import server_text
from typhapki.record import record
from typhapki.settings.wiring import Stage

MAX_ANSWER = 4 * 1024 * 1024  # bytes: a node's Typha pods fit in a few KiB
TYPHA_SELECTOR = typha_target(None).selector  # k8s-app=calico-typha
# The TLS Typha's (the stages parallel, switch and retire share it).
TLS_SELECTOR = typha_target(Stage.PARALLEL).selector
# DNS-1123: what Kubernetes allows as a namespace (label) and as a pod or node name
# (subdomain); anything else never reaches a URL.
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")


def valid_namespace(value: str) -> str:
    if not _LABEL.match(value):
        raise ValueError("not a Kubernetes namespace name")
    return value


def valid_node(value: str) -> str:
    if not _SUBDOMAIN.match(value):
        raise ValueError("not a Kubernetes node name")
    return value


@record(frozen=True)
class TyphaPod:
    """One Typha pod on this node, as the API lists it."""

    name: str
    terminating: bool  # metadata.deletionTimestamp is set
    started_at: datetime | None  # status.startTime
    node: str | None = None  # spec.nodeName
    namespace: str | None = None  # metadata.namespace
    typha: bool = False  # metadata.labels carries the selector's label (k8s-app=calico-typha)


class KubeNotFound(KubeApiError):
    """The API answered 404 to a GET: the object asked for does not exist (exit 7
    unless a caller knows what its absence means, as `fleet ready --stage switch`)."""


class KubeApi:
    """The two calls `restart-typha` makes, over one deadline."""

    def __init__(self, access: KubeAccess, timeout: float) -> None:
        self.access = access
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self._tls = access.tls_context()

    def typha_pods(
        self, namespace: str, node: str | None, selector: str = TYPHA_SELECTOR
    ) -> list[TyphaPod]:
        """The Typha pods the API places on `node` (None: one of the namespace's, if any)
        that carry `selector`'s label (the plain Typha's, or the TLS Typha's)."""
        selectors = {"labelSelector": selector}
        if node is None:
            selectors["limit"] = "1"
        else:
            selectors["fieldSelector"] = f"spec.nodeName={node}"
        query = urlencode(selectors)
        path = f"/api/v1/namespaces/{namespace}/pods?{query}"
        status, doc = self._call("GET", path, None)
        if status != 200:
            raise KubeApiError(self._refusal(path, status, doc))
        if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
            raise KubeApiError(f"{self._url(path)}: HTTP 200 without a pod list")
        pods = [self._pod(path, item, selector) for item in doc["items"]]
        for pod in pods:
            # The selectors are the API's to apply, and a proxy or a bug may drop them:
            # a pod elsewhere must never be evicted in this node's name.
            if pod.namespace != namespace or not pod.typha:
                raise KubeApiError(
                    f"{self._url(path)}: listed pod {pod.name} is not a Typha pod of "
                    f"namespace {namespace} ({selector}); nothing evicted"
                )
            if node is not None and pod.node != node:
                where = "no node" if pod.node is None else f"node {server_text(pod.node, 80)}"
                raise KubeApiError(
                    f"{self._url(path)}: listed Typha pod {pod.name} runs on {where}, "
                    f"not on {node}; nothing evicted"
                )
        return pods

    def evict(self, namespace: str, pod: str) -> bool:
        """Evict `pod`: True when the API took the eviction, False when the pod is gone
        already; RestartDeferredError when the PodDisruptionBudget refuses it now."""
        path = f"/api/v1/namespaces/{namespace}/pods/{quote(pod)}/eviction"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        status, doc = self._call("POST", path, json.dumps(body).encode())
        if status in (200, 201):
            return True
        if status == 404:
            return False
        if status == 429:
            raise RestartDeferredError(
                f"{self._url(path)}: eviction refused for now "
                f"({self._message(doc) or 'HTTP 429'}); the restart marker stays, "
                "the next run tries again"
            )
        raise KubeApiError(self._refusal(path, status, doc))

    def get(self, path: str, thing: str, right: str) -> Any:
        """The API's JSON object at `path` (a GET, inside the same deadline); anything
        but 200 with a JSON object is a KubeApiError naming the `thing` asked for and,
        for 401/403, the `right` ("get deployments") the credentials lack."""
        status, doc = self._call("GET", path, None)
        if status != 200:
            error = KubeNotFound if status == 404 else KubeApiError
            raise error(self._refusal(path, status, doc, right))
        if not isinstance(doc, dict):
            raise KubeApiError(f"{self._url(path)}: HTTP 200 without {thing}")
        return doc

    def url(self, path: str) -> str:
        """The URL a message names for `path` (no query)."""
        return self._url(path)

    # --- plumbing ---

    def _url(self, path: str) -> str:
        return self.access.server + path.split("?", 1)[0]

    def _pod(self, path: str, item: object, selector: str = TYPHA_SELECTOR) -> TyphaPod:
        bad = f"{self._url(path)}: a pod in the list is not what the API gives"
        if not isinstance(item, dict):
            raise KubeApiError(bad)
        meta = item.get("metadata")
        status = item.get("status", {})
        spec = item.get("spec", {})
        if not isinstance(meta, dict) or not isinstance(status, dict) or not isinstance(spec, dict):
            raise KubeApiError(bad)
        labels = meta.get("labels", {})
        node, namespace = spec.get("nodeName"), meta.get("namespace")
        if not isinstance(labels, dict) or not all(
            v is None or isinstance(v, str) for v in (node, namespace)
        ):
            raise KubeApiError(bad)
        key, _, value = selector.partition("=")
        name = meta.get("name")
        if not isinstance(name, str) or not _SUBDOMAIN.match(name):
            raise KubeApiError(f"{bad} (name {server_text(str(name), 80)!r})")
        deletion = meta.get("deletionTimestamp")
        start = status.get("startTime")
        if deletion is not None and not isinstance(deletion, str):
            raise KubeApiError(bad)
        if start is not None and not isinstance(start, str):
            raise KubeApiError(bad)
        return TyphaPod(
            name,
            deletion is not None,
            _timestamp(start) if start else None,
            node,
            namespace,
            labels.get(key) == value,
        )

    def _message(self, doc: object) -> str:
        if isinstance(doc, dict) and isinstance(doc.get("message"), str):
            return server_text(doc["message"], 200)
        return ""

    def _refusal(
        self, path: str, status: int, doc: object, what: str = "list pods or create pods/eviction"
    ) -> str:
        url = self._url(path)
        message = self._message(doc)
        detail = f": {message}" if message else ""
        if status in (401, 403):
            who = "client certificate" if self.access.client_cert_pem else "token"
            return (
                f"{url}: HTTP {status}{detail} (the kubeconfig's {who} may not "
                f"{what} in this namespace)"
            )
        if 300 <= status < 400:
            return f"{url}: HTTP {status} redirect not followed"
        return f"{url}: HTTP {status}{detail}"

    def _call(self, method: str, path: str, body: bytes | None) -> tuple[int, object]:
        url = self._url(path)
        try:
            status, raw = self._exchange(method, self.access.prefix + path, body)
        except TimeoutError:
            raise KubeApiError(f"{url}: no complete answer within {self.timeout:g} s") from None
        except ssl.SSLCertVerificationError as exc:
            reason = server_text(exc.verify_message or str(exc), 120)
            raise KubeApiError(
                f"{url}: TLS certificate not trusted by the kubeconfig's CA ({reason})"
            ) from None
        except ssl.SSLError as exc:
            reason = server_text(exc.reason or str(exc), 120)
            raise KubeApiError(f"{url}: TLS failed ({reason})") from None
        except http.client.HTTPException as exc:
            raise KubeApiError(
                f"{url}: not an HTTP answer ({type(exc).__name__}: {server_text(str(exc), 60)})"
            ) from None
        except OSError as exc:
            text = exc.strerror or str(exc) or type(exc).__name__
            raise KubeApiError(f"{url}: cannot connect: {server_text(text, 120)}") from None
        if len(raw) > MAX_ANSWER:
            raise KubeApiError(f"{url}: answer larger than {MAX_ANSWER} bytes")
        try:
            doc: Any = json.loads(raw) if raw.strip() else None
        except RecursionError:
            raise KubeApiError(f"{url}: answer nested more than {MAX_JSON_DEPTH} levels") from None
        except (ValueError, UnicodeDecodeError):
            if 200 <= status < 300:
                raise KubeApiError(f"{url}: HTTP {status}, not the API's JSON") from None
            doc = None
        if json_depth(doc) > MAX_JSON_DEPTH:
            raise KubeApiError(f"{url}: answer nested more than {MAX_JSON_DEPTH} levels")
        return status, doc

    def _exchange(self, method: str, target: str, body: bytes | None) -> tuple[int, bytes]:
        """One request on a fresh connection: (status, body), by the deadline."""
        access = self.access
        sock = socket.create_connection(
            (access.host, access.port), timeout=time_left(self.deadline)
        )
        try:
            sock.settimeout(time_left(self.deadline))
            sock = self._tls.wrap_socket(
                sock, server_hostname=access.tls_server_name or access.host
            )
            netloc = access.host if ":" not in access.host else f"[{access.host}]"
            head = [
                f"{method} {target} HTTP/1.1",
                f"Host: {netloc}:{access.port}",
                "User-Agent: typhapki",
                "Accept: application/json",
                "Connection: close",
            ]
            if access.token is not None:
                head.append(f"Authorization: Bearer {access.token}")
            data = body or b""
            if body is not None:
                head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
            sock.settimeout(time_left(self.deadline))
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("ascii") + data)
            answer = http.client.HTTPResponse(DeadlineSocket(sock, self.deadline), method=method)  # type: ignore[arg-type]
            try:
                answer.begin()
                return answer.status, answer.read(MAX_ANSWER + 1)
            finally:
                answer.close()
        finally:
            sock.close()


def _timestamp(value: str) -> datetime | None:
    """An RFC 3339 time as the API writes it (`2026-01-02T03:04:05Z`); None when it is not."""
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def restart_on_node(
    api: KubeApi,
    namespace: str,
    node: str,
    files_changed_at: float,
    selector: str | None = TYPHA_SELECTOR,
) -> str:
    """Evict this node's Typha pods that started before the files changed; what was done,
    as one line. RestartDeferredError when a pod is still terminating (the replacement is
    not up yet) or the budget refuses.

    `selector`: the label of the stage's Typha (typhapki/kubernetes/typhatarget.py); None
    when the stage is not known: the TLS Typha's pods when this node runs one (only the
    live switch's stages run one, and in parallel the plain Typha beside it reads no
    certificate), else the plain Typha's, as before the switch."""
    candidates = [selector] if selector is not None else [TLS_SELECTOR, TYPHA_SELECTOR]
    for selector in candidates:
        pods = api.typha_pods(namespace, node, selector)
        if pods:
            break
    live = [p for p in pods if not p.terminating]
    if not live and pods:
        raise RestartDeferredError(
            f"Typha pod {pods[0].name} on {node} is still terminating; the restart "
            "marker stays, the next run looks again"
        )
    if not live:
        if not any(api.typha_pods(namespace, None, s) for s in candidates):
            # A wrong namespace would otherwise clear every marker and restart nothing.
            raise UsageError(
                f"--namespace {namespace}: no Typha pod ({' or '.join(candidates)}) in it at "
                "all; name the namespace Typha runs in (calico-system under the operator)"
            )
        return f"no Typha pod on {node} (namespace {namespace}): nothing to restart"
    stale = [
        p for p in live if p.started_at is None or p.started_at.timestamp() <= files_changed_at
    ]
    if not stale:
        names = ", ".join(p.name for p in live)
        return f"Typha pod {names} on {node} started after the files changed: no restart needed"
    evicted = [p.name for p in stale if api.evict(namespace, p.name)]
    if not evicted:
        return f"Typha pod {stale[0].name} on {node} is gone already: nothing to restart"
    return f"evicted Typha pod {', '.join(evicted)} on {node}; its replacement loads the new files"

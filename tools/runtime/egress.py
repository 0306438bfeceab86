"""Guarded egress: the only way tenant-configured code reaches the network.

A `GuardedHttpClient` refuses destinations that resolve to loopback, private, link-local,
CGNAT, multicast, unspecified or reserved addresses (also when spelled as IPv4-mapped,
IPv4-compatible, 6to4, Teredo or NAT64 IPv6), unless an `EgressPolicy` allowlist entry
permits them. The check runs where the socket is opened (`GuardedBackend.connect_tcp`):
the host is resolved once, every answer is checked, and the socket connects to a checked
address, so DNS cannot change its answer between check and connect. TLS still verifies
and sends SNI for the host name in the URL.

Every redirect hop is checked again (scheme, and literal-IP hosts before any connect),
and each request is bounded in connect time, total time and response size.
"""

from __future__ import annotations

import asyncio
import functools
import http.cookiejar
import ipaddress
import json as jsonlib
import os
import socket
import ssl
import threading
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpcore2
import httpx2

__all__ = [
    "EgressConnectError",
    "EgressError",
    "EgressPolicy",
    "EgressRefused",
    "EgressResponse",
    "EgressTimeout",
    "GuardedBackend",
    "GuardedHttpClient",
    "GuardedTransport",
    "ResponseTooLarge",
    "refusal_reason",
]


class EgressError(Exception):
    """Base of every egress failure; `str(exc)` is a message fit to show the tenant."""


class EgressRefused(EgressError):
    """The destination or scheme is not allowed by the policy."""


class ResponseTooLarge(EgressError):
    """The response body exceeded `max_bytes`."""


class EgressTimeout(EgressError):
    """Connecting, or the whole request including redirects, took too long."""


class EgressConnectError(EgressError):
    """DNS failure, connection refused or reset, TLS failure, malformed response."""


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port, timeout) -> resolved IP strings, in the order they should be tried.
Resolver = Callable[[str, int, "float | None"], Awaitable[list[str]]]

ALLOWED_SCHEMES = frozenset({"http", "https"})
DEFAULT_LIMITS = httpx2.Limits(
    max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0
)


def _v4(*cidrs_and_reasons: tuple[str, str]) -> tuple[tuple[ipaddress.IPv4Network, str], ...]:
    return tuple((ipaddress.IPv4Network(c), r) for c, r in cidrs_and_reasons)


def _v6(*cidrs_and_reasons: tuple[str, str]) -> tuple[tuple[ipaddress.IPv6Network, str], ...]:
    return tuple((ipaddress.IPv6Network(c), r) for c, r in cidrs_and_reasons)


_REFUSED_V4 = _v4(
    ("0.0.0.0/8", "unspecified"),
    ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("169.254.0.0/16", "link-local"),
    ("100.64.0.0/10", "cgnat"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
    ("192.0.0.0/24", "reserved"),  # IETF protocol assignments
    ("192.0.2.0/24", "reserved"),  # documentation
    ("198.51.100.0/24", "reserved"),  # documentation
    ("203.0.113.0/24", "reserved"),  # documentation
    ("198.18.0.0/15", "reserved"),  # benchmarking
    ("192.88.99.0/24", "reserved"),  # 6to4 relay anycast
)
_REFUSED_V6 = _v6(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("fc00::/7", "private"),
    ("fec0::/10", "private"),  # deprecated site-local
    ("64:ff9b:1::/48", "private"),  # local-use NAT64
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
    ("100::/64", "reserved"),  # discard-only
    ("2001:db8::/32", "reserved"),  # documentation
)
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")  # IPv4-translated (RFC 2765)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address stands for: mapped, compatible, NAT64, 6to4, Teredo."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip in _IPV4_COMPATIBLE or ip in _NAT64 or ip in _SIIT:
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return list(ip.teredo)
    return []


def refusal_reason(ip: IPAddress) -> str | None:
    """Why `ip` must not be reached ("loopback", "private", ...), or None if it is public."""
    if isinstance(ip, ipaddress.IPv4Address):
        for network, reason in _REFUSED_V4:
            if ip in network:
                return reason
        return None if ip.is_global else "reserved"
    for network, reason in _REFUSED_V6:
        if ip in network:
            return reason
    embedded = _embedded_ipv4(ip)
    if embedded:
        for inner in embedded:
            reason = refusal_reason(inner)
            if reason is not None:
                return reason
        if ip.ipv4_mapped is not None:
            return None  # a mapped public address is that public address
    return None if ip.is_global else "reserved"


def _parse_ip(text: str) -> IPAddress | None:
    """`text` as an address if it is a canonical IPv4/IPv6 literal (brackets allowed)."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def literal_ip(host: str) -> IPAddress | None:
    """The address `host` denotes without DNS, as getaddrinfo reads it, or None for a name.

    Besides canonical literals this accepts the legacy IPv4 spellings that getaddrinfo
    (inet_aton) takes: "2130706433", "0x7f000001", "017700000001", "127.1".
    """
    ip = _parse_ip(host)
    if ip is not None:
        return ip
    if not host or not (host[0].isdigit()):
        return None  # every inet_aton spelling starts with a digit
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _normalise_host(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host.rstrip(".")


@dataclass(frozen=True)
class EgressPolicy:
    """Which non-public destinations are allowed.

    Entries: a network in CIDR ("10.0.0.0/8", "::1/128"), a bare IP ("127.0.0.1"), a host
    name ("api.internal", exact) or a suffix pattern ("*.internal": any subdomain). A host
    name entry allows that host whatever it resolves to; a network entry allows resolved
    addresses inside it. Public addresses are always allowed. Raises ValueError on an entry
    that is none of these.
    """

    allowlist: tuple[str, ...] = ()
    _networks: tuple[IPNetwork, ...] = field(init=False, repr=False, compare=False)
    _hosts: frozenset[str] = field(init=False, repr=False, compare=False)
    _suffixes: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.allowlist, str):
            raise ValueError("allowlist must be a sequence of entries, not one string")
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        suffixes: list[str] = []
        for raw in self.allowlist:
            entry = _normalise_host(str(raw))
            if not entry:
                raise ValueError("empty egress allowlist entry")
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            name = entry[2:] if entry.startswith("*.") else entry
            labels = name.split(".")
            if not all(
                label and len(label) <= 63 and all(c.isalnum() or c in "-_" for c in label)
                for label in labels
            ):
                raise ValueError(f"invalid egress allowlist entry {raw!r}")
            if entry.startswith("*."):
                suffixes.append("." + name)
            else:
                hosts.add(name)
        object.__setattr__(self, "allowlist", tuple(self.allowlist))
        object.__setattr__(self, "_networks", tuple(networks))
        object.__setattr__(self, "_hosts", frozenset(hosts))
        object.__setattr__(self, "_suffixes", tuple(suffixes))

    def is_host_allowlisted(self, host: str) -> bool:
        """True if a host-name entry ("api.internal" or "*.internal") matches `host`."""
        if not self._hosts and not self._suffixes:
            return False
        host = _normalise_host(host)
        return host in self._hosts or host.endswith(self._suffixes)

    def check_address(self, host: str, ip: str) -> None:
        """Raise EgressRefused unless `host` (which resolved to `ip`) may be reached."""
        if self.is_host_allowlisted(host):
            return
        address = _parse_ip(ip)
        if address is None:
            raise EgressRefused(f"destination {host} resolved to an invalid address {ip!r}")
        self._check_ip(host, address)

    def check_addresses(self, host: str, ips: Iterable[str]) -> None:
        """Raise EgressRefused if ANY address `host` resolved to is refused.

        An answer mixing public and private addresses is a DNS-rebinding trick, so one
        refused address refuses the host.
        """
        if self.is_host_allowlisted(host):
            return
        for ip in ips:
            self.check_address(host, ip)

    def _check_ip(self, host: str, address: IPAddress) -> None:
        if self._networks:
            candidates: list[IPAddress] = [address]
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                candidates.append(address.ipv4_mapped)
            for candidate in candidates:
                for network in self._networks:
                    if candidate.version == network.version and candidate in network:
                        return
        reason = refusal_reason(address)
        if reason is not None:
            shown = str(address)
            where = shown if _normalise_host(host) == shown else f"{host} ({shown})"
            raise EgressRefused(f"destination {where} is not allowed ({reason})")


async def resolve_with_getaddrinfo(host: str, port: int, timeout: float | None) -> list[str]:
    """Resolve `host` with the running loop's getaddrinfo (a thread-pool call).

    Raises EgressConnectError if the name does not resolve, httpcore2.ConnectTimeout if
    resolution takes longer than `timeout`.
    """
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except TimeoutError:
        raise httpcore2.ConnectTimeout(f"resolving {host} timed out") from None
    except (socket.gaierror, UnicodeError) as exc:
        raise EgressConnectError(f"cannot resolve host {host}") from exc
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        ip = str(sockaddr[0])
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise EgressConnectError(f"cannot resolve host {host}")
    return addresses


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """An httpcore2 network backend that connects only to addresses the policy allows.

    `connect_tcp` resolves `host` once, checks every answer, then connects to the checked
    addresses in order (each attempt gets what is left of `timeout`). httpcore starts TLS
    on the returned stream with the original host name, so certificate checks and SNI are
    unchanged. Unix sockets are refused.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver = resolve_with_getaddrinfo,
        inner: httpcore2.AsyncNetworkBackend | None = None,
    ) -> None:
        self._policy = policy
        self._resolve = resolver
        self._inner = inner if inner is not None else httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        deadline = None if timeout is None else time.monotonic() + timeout
        literal = _parse_ip(host)
        if literal is not None:
            addresses = [str(literal)]
        else:
            addresses = await self._resolve(host, port, timeout)
        self._policy.check_addresses(host, addresses)

        last_error: Exception | None = None
        for ip in addresses:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                return await self._inner.connect_tcp(
                    ip,
                    port,
                    timeout=remaining,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore2.ConnectTimeout:
                raise
            except httpcore2.ConnectError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise EgressRefused("unix socket destinations are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx2.AsyncHTTPTransport):
    """An httpx2 transport whose connection pool dials only through `backend`.

    Proxies are never used (no `trust_env`); HTTP/1.1 only.
    """

    def __init__(
        self,
        *,
        backend: GuardedBackend,
        ssl_context: ssl.SSLContext,
        limits: httpx2.Limits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__(verify=ssl_context, trust_env=False, limits=limits)
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            retries=0,
            network_backend=backend,
        )


class _RefuseAllCookies(http.cookiejar.DefaultCookiePolicy):
    """The shared client must never carry one response's cookies into another request."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


@dataclass(frozen=True)
class EgressResponse:
    status_code: int
    headers: dict[str, str]
    content: bytes
    url: str
    elapsed_ms: float

    def json(self) -> Any:
        return jsonlib.loads(self.content)

    @property
    def text(self) -> str:
        charset = "utf-8"
        for param in self.headers.get("content-type", "").split(";")[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "charset" and value.strip():
                charset = value.strip().strip("\"'")
        try:
            return self.content.decode(charset, errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")


_REDIRECT_BODY_DRAIN_LIMIT = 65_536


class GuardedHttpClient:
    """HTTP client for tenant-configured destinations, safe to share across event loops.

    One pooled httpx2.AsyncClient is kept per running event loop (created on first use in
    that loop, about a millisecond), so keep-alive connections are reused within a loop.
    A loop's client is closed when the loop shuts down its async generators, as
    `asyncio.run` and asgiref's `async_to_sync` do; clients of loops closed without that
    are dropped when the next loop's client is created, and the garbage collector closes
    their sockets.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        max_redirects: int = 5,
        connect_timeout_s: float = 5.0,
        max_connections: int = 100,
    ) -> None:
        self.policy = policy
        self.max_redirects = max_redirects
        self.connect_timeout_s = connect_timeout_s
        self._limits = httpx2.Limits(
            max_connections=max_connections,
            max_keepalive_connections=min(20, max_connections),
            keepalive_expiry=5.0,
        )
        self._backend = GuardedBackend(policy)
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    async def _client(self) -> httpx2.AsyncClient:
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is not None and not entry.client.is_closed:
            return entry.client
        with self._lock:
            entry = self._clients.get(loop)
            if entry is not None and not entry.client.is_closed:
                return entry.client
            for other in [lp for lp in self._clients if lp.is_closed()]:
                del self._clients[other]
            transport = GuardedTransport(
                backend=self._backend, ssl_context=_tool_ssl_context(), limits=self._limits
            )
            client = httpx2.AsyncClient(
                transport=transport,
                trust_env=False,
                follow_redirects=False,
                cookies=http.cookiejar.CookieJar(policy=_RefuseAllCookies()),
            )
            entry = _LoopClient(client, _close_at_loop_shutdown(client))
            self._clients[loop] = entry
        # The first step registers the generator with the loop (sys.set_asyncgen_hooks),
        # so loop.shutdown_asyncgens() runs its `finally`, closing the client in-loop.
        await entry.closer.asend(None)
        return client

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: dict | None = None,
        headers: dict[str, str] | None = None,
        json: Any = None,
        content: bytes | None = None,
        timeout_s: float = 10.0,
        max_bytes: int = 1_000_000,
        follow_redirects: bool = True,
    ) -> EgressResponse:
        """Send one request, following up to `max_redirects` redirects, each re-checked;
        with `follow_redirects` False a redirect is the answer (a confirmed write is sent
        once, to the URL a person approved, never resent elsewhere).

        `timeout_s` bounds the whole exchange (every hop, body included); each connect
        is further bounded by `connect_timeout_s`. The body is streamed and the request
        fails with ResponseTooLarge as soon as it exceeds `max_bytes` (decoded size).
        """
        _check_scheme(urlsplit(url).scheme)
        client = await self._client()
        started = time.perf_counter()
        deadline = started + timeout_s
        host = url  # for messages; the current hop's host once the URL parses
        try:
            async with asyncio.timeout(timeout_s):
                request = client.build_request(
                    method,
                    url,
                    params=params,
                    # identity: the size cap then bounds what is held, not a decompressed bomb
                    headers={"accept-encoding": "identity", **(headers or {})},
                    json=json,
                    content=content,
                    timeout=self._hop_timeout(deadline),
                )
                hops = 0
                while True:
                    host = request.url.host or url
                    self._check_url(request.url)
                    response = await client.send(request, stream=True)
                    try:
                        if not (follow_redirects and response.has_redirect_location):
                            body = await _read_bounded(response, max_bytes)
                            return EgressResponse(
                                status_code=response.status_code,
                                headers=dict(response.headers.items()),
                                content=body,
                                url=str(request.url),
                                elapsed_ms=(time.perf_counter() - started) * 1000.0,
                            )
                        if hops >= self.max_redirects:
                            raise EgressRefused(f"more than {self.max_redirects} redirects")
                        next_request = response.next_request
                        if next_request is None:
                            location = response.headers.get("location", "")
                            raise EgressRefused(f"invalid redirect location {location!r}")
                        await _drain_redirect(response)
                    finally:
                        await response.aclose()
                    if _origin(next_request.url) != _origin(request.url):
                        # httpx drops only Authorization; credentials may sit in any header
                        # the caller set (X-API-Key, ...), so none of them cross origins.
                        for name in headers or {}:
                            next_request.headers.pop(name, None)
                    hops += 1
                    next_request.extensions = {
                        **next_request.extensions,
                        "timeout": self._hop_timeout(deadline).as_dict(),
                    }
                    request = next_request
        except TimeoutError:
            raise EgressTimeout(f"timed out after {float(timeout_s)} s") from None
        except httpx2.ConnectTimeout:
            connect_s = min(float(self.connect_timeout_s), float(timeout_s))
            raise EgressTimeout(f"timed out after {connect_s} s connecting to {host}") from None
        except httpx2.TimeoutException:
            raise EgressTimeout(f"timed out after {float(timeout_s)} s") from None
        except (httpx2.InvalidURL, httpx2.UnsupportedProtocol) as exc:
            raise EgressRefused(f"invalid URL {url!r}: {exc}") from None
        except httpx2.ConnectError as exc:
            raise EgressConnectError(_with_detail(f"cannot connect to {host}", exc)) from exc
        except httpx2.RemoteProtocolError as exc:
            raise EgressConnectError(_with_detail(f"bad response from {host}", exc)) from exc
        except httpx2.TransportError as exc:
            raise EgressConnectError(_with_detail(f"network error with {host}", exc)) from exc
        except httpx2.DecodingError as exc:
            message = _with_detail(f"cannot decode response from {host}", exc)
            raise EgressConnectError(message) from exc

    def _hop_timeout(self, deadline: float) -> httpx2.Timeout:
        remaining = max(deadline - time.perf_counter(), 0.001)
        return httpx2.Timeout(
            remaining, connect=min(self.connect_timeout_s, remaining), pool=remaining
        )

    def _check_url(self, url: httpx2.URL) -> None:
        """Scheme, and a literal-IP host (any spelling), checked before any connect."""
        _check_scheme(url.scheme)
        host = url.raw_host.decode("ascii")
        if not host:
            raise EgressRefused(f"URL {str(url)!r} has no host")
        ip = literal_ip(host)
        if ip is not None:
            self.policy.check_address(host, str(ip))

    async def aclose(self) -> None:
        """Close the pooled client of the running loop; other loops' clients are kept."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._clients.pop(loop, None)
        if entry is not None:
            await entry.closer.aclose()
            await entry.client.aclose()


@dataclass(frozen=True)
class _LoopClient:
    client: httpx2.AsyncClient
    closer: AsyncGenerator[None, None]


async def _close_at_loop_shutdown(client: httpx2.AsyncClient) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await client.aclose()


def _check_scheme(scheme: str) -> None:
    if scheme.lower() not in ALLOWED_SCHEMES:
        shown = repr(scheme) if scheme else "(none)"
        raise EgressRefused(f"scheme {shown} is not allowed (only http and https)")


async def _read_bounded(response: httpx2.Response, max_bytes: int) -> bytes:
    """The decoded body, refusing early on a declared length over `max_bytes` and otherwise
    as soon as the bytes received pass it (the connection is then dropped, not drained)."""
    declared = response.headers.get("content-length")
    if (
        declared is not None
        and declared.isdigit()
        and int(declared) > max_bytes
        and response.request.method != "HEAD"
        and response.status_code not in (204, 304)
        and response.headers.get("content-encoding", "identity").strip().lower() in ("", "identity")
    ):
        raise ResponseTooLarge(f"response larger than {max_bytes} bytes")
    chunks: list[bytes] = []
    received = 0
    async for chunk in response.aiter_bytes():
        received += len(chunk)
        if received > max_bytes:
            raise ResponseTooLarge(f"response larger than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain_redirect(response: httpx2.Response) -> None:
    """Read a small redirect body so the connection returns to the pool; else drop it."""
    received = 0
    async for chunk in response.aiter_raw():
        received += len(chunk)
        if received > _REDIRECT_BODY_DRAIN_LIMIT:
            return  # aclose() then discards the connection


def _with_detail(message: str, exc: BaseException) -> str:
    """`message` plus the most specific cause: an OS error's text ("Connection refused")."""
    detail = str(exc).strip()
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno:
            detail = os.strerror(cause.errno)
            break
        cause = cause.__cause__ or cause.__context__
    return f"{message}: {detail}" if detail else message


def _origin(url: httpx2.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


SDK_MAX_RESPONSE_BYTES = 32 * 1024 * 1024  # a model's or an MCP server's answer, whole


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that fails with ResponseTooLarge past `max_bytes` received."""

    def __init__(self, stream: Any, max_bytes: int) -> None:
        self._stream, self._max_bytes = stream, max_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = 0
        async for chunk in self._stream:
            received += len(chunk)
            if received > self._max_bytes:
                raise ResponseTooLarge(f"response larger than {self._max_bytes} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class _BoundedTransport(GuardedTransport):
    """Answers uncompressed and at most `max_bytes` long: asked with `Accept-Encoding:
    identity`, and one sent compressed anyway is refused, since a few hundred kB of gzip
    decode to gigabytes (an SDK reads the body whole) and the cap counts bytes received."""

    def __init__(self, *, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._max_bytes = max_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await super().handle_async_request(request)
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            await response.aclose()
            raise EgressError(f"the server answered {encoding[:20]}-compressed, not as asked")
        response.stream = _CappedStream(response.stream, self._max_bytes)
        return response


def guarded_async_client(
    policy: EgressPolicy,
    *,
    timeout: float = 60.0,
    max_bytes: int = SDK_MAX_RESPONSE_BYTES,
    max_connections: int | None = None,
) -> httpx2.AsyncClient:
    """A plain httpx2 client whose every connection passes the egress policy: for SDKs that
    take an `http_client` (model providers at tenant-chosen base URLs, MCP servers). No
    redirects are followed, no proxies or cookies used; answers are uncompressed and at
    most `max_bytes`. `max_connections`: how many requests may be in flight at once (the
    pool's default, 100, otherwise); a caller running more at once would queue in it."""
    limits = DEFAULT_LIMITS
    if max_connections is not None:
        limits = httpx2.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=DEFAULT_LIMITS.keepalive_expiry,
        )
    return httpx2.AsyncClient(
        transport=_BoundedTransport(
            backend=GuardedBackend(policy),
            ssl_context=default_ssl_context(),
            max_bytes=max_bytes,
            limits=limits,
        ),
        trust_env=False,
        follow_redirects=False,
        timeout=timeout,
    )


@functools.cache
def _tool_ssl_context() -> ssl.SSLContext:
    """HTTP tools' trust store (httpx's, certifi), built once per process (~20 ms) and shared
    by every GuardedHttpClient: a client made per registry paid it again."""
    return httpx2.create_ssl_context(trust_env=False)


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """Built once per process: creating one loads the CA bundle (~20 ms)."""
    return ssl.create_default_context()

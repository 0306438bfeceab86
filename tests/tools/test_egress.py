"""tools/runtime/egress.py: what is refused, what is allowed, and the bounds on a request.

No test reaches beyond loopback: refusals happen before any connect, the only server is
the LocalServer on 127.0.0.1, and DNS answers other than localhost come from fake
resolvers.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gzip
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpcore2
import httpx2
import pytest

from tests.tools.local_server import LocalServer, Reply
from tools.runtime.egress import (
    EgressConnectError,
    EgressPolicy,
    EgressRefused,
    EgressTimeout,
    GuardedBackend,
    GuardedHttpClient,
    GuardedTransport,
    ResponseTooLarge,
    _read_bounded,
    literal_ip,
    refusal_reason,
)

LOCAL = EgressPolicy(allowlist=("127.0.0.1/32",))


def fetch(client: GuardedHttpClient, url: str, **kwargs) -> object:
    async def go():
        try:
            return await client.request("GET", url, **kwargs)
        finally:
            await client.aclose()

    return asyncio.run(go())


@contextlib.contextmanager
def dialled() -> Iterator[list[str]]:
    """The addresses sockets are opened to meanwhile (`host:port`, in order)."""
    addresses: list[str] = []
    connect = httpcore2.AnyIOBackend.connect_tcp

    async def recording(self, host, port, *args, **kwargs):
        addresses.append(f"{host}:{port}")
        return await connect(self, host, port, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpcore2.AnyIOBackend, "connect_tcp", recording)
        yield addresses


def refused_message(url: str, policy: EgressPolicy | None = None) -> str:
    client = GuardedHttpClient(policy or EgressPolicy(), connect_timeout_s=0.5)
    with dialled() as addresses, pytest.raises(EgressRefused) as caught:
        fetch(client, url, timeout_s=2.0)
    assert addresses == [], "refusal must come before any connect"
    return str(caught.value)


@contextlib.contextmanager
def announcing_server(content_length: int) -> Iterator[str]:
    """A server whose one reply announces `content_length` bytes and then sends none: a
    client that reads the body waits (until its timeout); one that judges the length does
    not. Yields its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        with contextlib.suppress(OSError):  # closed before anyone connected
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % content_length)
                done.wait(60)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        listener.close()
        thread.join(5)


# --- refused destinations -------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1/", "destination 127.0.0.1 is not allowed (loopback)"),
        ("http://10.1.2.3/", "destination 10.1.2.3 is not allowed (private)"),
        ("http://172.16.5.4/", "destination 172.16.5.4 is not allowed (private)"),
        ("http://192.168.1.1/", "destination 192.168.1.1 is not allowed (private)"),
        ("http://100.64.0.1/", "destination 100.64.0.1 is not allowed (cgnat)"),
        (
            "http://169.254.169.254/latest/meta-data/",
            "destination 169.254.169.254 is not allowed (link-local)",
        ),
        ("http://0.0.0.0/", "destination 0.0.0.0 is not allowed (unspecified)"),
        ("http://224.0.0.1/", "destination 224.0.0.1 is not allowed (multicast)"),
        ("http://255.255.255.255/", "destination 255.255.255.255 is not allowed (broadcast)"),
        ("http://[::1]/", "destination ::1 is not allowed (loopback)"),
        ("http://[::]/", "destination :: is not allowed (unspecified)"),
        ("http://[fe80::1]/", "destination fe80::1 is not allowed (link-local)"),
        ("http://[fc00::1]/", "destination fc00::1 is not allowed (private)"),
        ("http://[ff02::1]/", "destination ff02::1 is not allowed (multicast)"),
    ],
)
def test_it_refuses_non_public_literal_addresses(url: str, message: str) -> None:
    assert refused_message(url) == message


@pytest.mark.parametrize(
    "url",
    [
        "http://[::ffff:127.0.0.1]/",  # IPv4-mapped, dotted
        "http://[::ffff:7f00:1]/",  # IPv4-mapped, hex
        "http://[::127.0.0.1]/",  # IPv4-compatible
        "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
        "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
    ],
)
def test_it_refuses_ipv6_forms_of_loopback(url: str) -> None:
    assert refused_message(url).endswith("is not allowed (loopback)")


def test_it_refuses_nat64_of_a_private_address() -> None:
    assert refused_message("http://[64:ff9b::a01:203]/").endswith("(private)")


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "017700000001", "127.1"])
def test_it_refuses_decimal_hex_octal_and_short_ipv4_spellings(host: str) -> None:
    message = refused_message(f"http://{host}/")
    assert message == f"destination {host} (127.0.0.1) is not allowed (loopback)"


def test_it_refuses_a_host_name_resolving_to_loopback() -> None:
    message = refused_message("http://localhost:9/")
    assert message.startswith("destination localhost (")
    assert message.endswith("is not allowed (loopback)")


def test_it_refuses_non_http_schemes() -> None:
    assert "scheme 'ftp' is not allowed" in refused_message("ftp://example.com/")
    assert "scheme 'file' is not allowed" in refused_message("file:///etc/passwd")


# --- the policy itself ----------------------------------------------------------------


def test_it_refuses_a_dns_answer_mixing_public_and_private_addresses() -> None:
    policy = EgressPolicy()
    policy.check_addresses("example.com", ["93.184.216.34", "2606:2800:220:1::1"])
    with pytest.raises(EgressRefused, match=r"rebind\.example \(127\.0\.0\.1\).*loopback"):
        policy.check_addresses("rebind.example", ["93.184.216.34", "127.0.0.1"])
    with pytest.raises(EgressRefused, match="private"):
        policy.check_addresses("rebind.example", ["10.0.0.5", "93.184.216.34"])


def test_a_mixed_dns_answer_is_refused_at_connect_time_without_connecting() -> None:
    connects: list[str] = []

    class SpyBackend(httpcore2.AsyncNetworkBackend):
        async def connect_tcp(self, host, port, timeout=None, **kwargs):
            connects.append(host)
            raise AssertionError("must not connect")

    async def rebinding_dns(host: str, port: int, timeout: float | None) -> list[str]:
        return ["93.184.216.34", "192.168.0.10"]

    backend = GuardedBackend(EgressPolicy(), resolver=rebinding_dns, inner=SpyBackend())
    with pytest.raises(EgressRefused, match=r"rebind\.example \(192\.168\.0\.10\).*private"):
        asyncio.run(backend.connect_tcp("rebind.example", 443, timeout=1.0))
    assert connects == []


def test_the_backend_connects_to_the_checked_address_not_the_name() -> None:
    connects: list[str] = []

    class SpyBackend(httpcore2.AsyncNetworkBackend):
        async def connect_tcp(self, host, port, timeout=None, **kwargs):
            connects.append(host)
            raise httpcore2.ConnectError("refused")

    async def dns(host: str, port: int, timeout: float | None) -> list[str]:
        return ["93.184.216.34", "93.184.216.35"]

    backend = GuardedBackend(EgressPolicy(), resolver=dns, inner=SpyBackend())
    with pytest.raises(httpcore2.ConnectError):
        asyncio.run(backend.connect_tcp("api.example", 443, timeout=1.0))
    assert connects == ["93.184.216.34", "93.184.216.35"]


def test_public_addresses_are_allowed() -> None:
    for ip in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]:
        assert refusal_reason(ipaddress.ip_address(ip)) is None, ip
    EgressPolicy().check_address("dns.google", "8.8.8.8")


def test_allowlist_networks_bare_ips_and_host_names() -> None:
    policy = EgressPolicy(
        allowlist=("10.0.0.0/8", "192.168.1.7", "::1/128", "api.internal", "*.corp.example")
    )
    policy.check_address("db", "10.9.8.7")
    policy.check_address("printer", "192.168.1.7")
    policy.check_address("localhost", "::1")
    with pytest.raises(EgressRefused, match=r"192\.168\.1\.8 is not allowed"):
        policy.check_address("192.168.1.8", "192.168.1.8")
    with pytest.raises(EgressRefused, match="loopback"):
        policy.check_address("localhost", "127.0.0.1")

    assert policy.is_host_allowlisted("api.internal")
    assert policy.is_host_allowlisted("API.Internal.")
    assert not policy.is_host_allowlisted("x.api.internal")
    assert policy.is_host_allowlisted("a.corp.example")
    assert policy.is_host_allowlisted("a.b.corp.example")
    assert not policy.is_host_allowlisted("corp.example")
    assert not policy.is_host_allowlisted("evilcorp.example")
    policy.check_address("api.internal", "127.0.0.1")  # a name entry allows any address


def test_bad_allowlist_entries_fail_loudly() -> None:
    for entry in ["bad host!", "", "10.0.0.0/33x"]:
        with pytest.raises(ValueError, match="allowlist entry"):
            EgressPolicy(allowlist=(entry,))
    with pytest.raises(ValueError, match="not one string"):
        EgressPolicy(allowlist="10.0.0.0/8")  # type: ignore[arg-type]


def test_literal_ip_reads_addresses_as_getaddrinfo_does() -> None:
    assert str(literal_ip("0x7f.1")) == "127.0.0.1"
    assert str(literal_ip("[::1]")) == "::1"
    assert literal_ip("1password.com") is None
    assert literal_ip("example.com") is None


# --- allowed destinations -------------------------------------------------------------


def test_it_allows_the_local_server_when_its_network_is_allowlisted(local_server) -> None:
    local_server.route("GET", "/v1/items/42", Reply(json={"id": 42}, headers={"X-Trace": "t1"}))
    response = fetch(
        GuardedHttpClient(LOCAL), f"{local_server.url}/v1/items/42", params={"units": "metric"}
    )
    assert response.status_code == 200
    assert response.json() == {"id": 42}
    assert response.headers["x-trace"] == "t1"
    assert response.url == f"{local_server.url}/v1/items/42?units=metric"
    assert response.elapsed_ms > 0
    assert local_server.requests[0].path == "/v1/items/42?units=metric"


def test_it_allows_the_local_server_through_a_host_name_entry(local_server) -> None:
    local_server.route("POST", "/echo", Reply(status=201, body=b"made"))
    client = GuardedHttpClient(EgressPolicy(allowlist=("localhost",)))

    async def go():
        try:
            return await client.request(
                "POST", f"http://localhost:{local_server.port}/echo", json={"a": 1}
            )
        finally:
            await client.aclose()

    response = asyncio.run(go())
    assert (response.status_code, response.text) == (201, "made")
    assert local_server.requests[0].json() == {"a": 1}


# --- redirects ------------------------------------------------------------------------


def test_a_redirect_to_a_private_address_is_refused_without_connecting(local_server) -> None:
    local_server.route("GET", "/go", Reply(302, headers={"Location": "http://10.1.2.3/admin"}))
    client = GuardedHttpClient(LOCAL)
    with dialled() as addresses, pytest.raises(EgressRefused) as caught:
        fetch(client, f"{local_server.url}/go")
    assert str(caught.value) == "destination 10.1.2.3 is not allowed (private)"
    assert addresses == [f"127.0.0.1:{local_server.port}"]  # the first hop only
    assert [r.path for r in local_server.requests] == ["/go"]


@pytest.mark.parametrize("location", ["file:///etc/passwd", "ftp://example.com/x"])
def test_a_redirect_to_a_non_http_scheme_is_refused(local_server, location: str) -> None:
    local_server.route("GET", "/go", Reply(301, headers={"Location": location}))
    with pytest.raises(EgressRefused, match=r"scheme '(file|ftp)' is not allowed"):
        fetch(GuardedHttpClient(LOCAL), f"{local_server.url}/go")


def test_allowed_redirects_are_followed_up_to_the_limit(local_server) -> None:
    local_server.route("GET", "/a", Reply(302, headers={"Location": "/b"}))
    local_server.route("GET", "/b", Reply(307, headers={"Location": f"{local_server.url}/c"}))
    local_server.route("GET", "/c", Reply(json={"done": True}))
    response = fetch(GuardedHttpClient(LOCAL), f"{local_server.url}/a")
    assert response.json() == {"done": True}
    assert response.url == f"{local_server.url}/c"

    local_server.route("GET", "/loop", Reply(302, headers={"Location": "/loop"}))
    local_server.requests.clear()
    with pytest.raises(EgressRefused, match="more than 5 redirects"):
        fetch(GuardedHttpClient(LOCAL), f"{local_server.url}/loop")
    assert len(local_server.requests) == 6


# --- bounds ---------------------------------------------------------------------------


def test_an_oversized_response_is_refused_from_its_length() -> None:
    with (
        announcing_server(20_000_000) as url,
        pytest.raises(ResponseTooLarge, match=r"^response larger than 1000 bytes$"),
    ):
        # No body ever comes: reading it would end in a timeout, not in this refusal.
        fetch(GuardedHttpClient(LOCAL), f"{url}/big", max_bytes=1000, timeout_s=30)


def test_a_head_response_is_not_judged_by_its_content_length(local_server) -> None:
    local_server.route("HEAD", "/big", Reply(body=b"x" * 5000))
    client = GuardedHttpClient(LOCAL)

    async def go():
        try:
            return await client.request("HEAD", f"{local_server.url}/big", max_bytes=1000)
        finally:
            await client.aclose()

    response = asyncio.run(go())
    assert (response.status_code, response.headers["content-length"]) == (200, "5000")
    assert response.content == b""


def test_a_compressed_body_is_cut_once_its_decoded_size_passes_the_limit(local_server) -> None:
    bomb = gzip.compress(b"\0" * 20_000_000)  # about 20 KB on the wire
    local_server.route("GET", "/bomb", Reply(body=bomb, headers={"Content-Encoding": "gzip"}))
    with pytest.raises(ResponseTooLarge, match="response larger than 100000 bytes"):
        fetch(GuardedHttpClient(LOCAL), f"{local_server.url}/bomb", max_bytes=100_000)


def test_the_sdks_client_asks_for_plain_answers_and_bounds_them(local_server) -> None:
    """guarded_async_client (model providers' and MCP's SDKs read answers whole): asked
    uncompressed, a gzip bomb sent anyway is refused, and a plain body stops at the cap."""
    from tools.runtime.egress import EgressError, guarded_async_client

    bomb = gzip.compress(b"\0" * 20_000_000)
    local_server.route("GET", "/bomb", Reply(body=bomb, headers={"Content-Encoding": "gzip"}))
    local_server.route("GET", "/big", Reply(body=b"y" * 5000))
    local_server.route("GET", "/small", Reply(json={"ok": True}))

    async def get(path: str) -> httpx2.Response:
        async with guarded_async_client(LOCAL, max_bytes=1000) as client:
            return await client.get(f"{local_server.url}{path}")

    with pytest.raises(EgressError, match="answered gzip-compressed, not as asked"):
        asyncio.run(get("/bomb"))
    with pytest.raises(ResponseTooLarge, match="response larger than 1000 bytes"):
        asyncio.run(get("/big"))
    assert asyncio.run(get("/small")).json() == {"ok": True}
    assert {r.headers["accept-encoding"] for r in local_server.requests} == {"identity"}


def test_an_endless_body_stops_being_read_just_past_the_limit() -> None:
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        while True:
            sent += 4096
            yield b"y" * 4096

    response = httpx2.Response(200, content=endless())
    with pytest.raises(ResponseTooLarge, match="response larger than 10000 bytes"):
        asyncio.run(_read_bounded(response, 10_000))
    assert sent == 3 * 4096


def test_a_slow_server_times_out_quickly_with_a_clear_message(local_server) -> None:
    local_server.route("GET", "/slow", Reply(json={}, delay_s=30.0))
    started = time.perf_counter()
    with pytest.raises(EgressTimeout) as caught:
        fetch(GuardedHttpClient(LOCAL), f"{local_server.url}/slow", timeout_s=0.3)
    assert str(caught.value) == "timed out after 0.3 s"
    # The point is the timeout: back long before the reply (30 s), with 10 times the 0.3 s
    # to spare on a busy machine.
    assert time.perf_counter() - started < 3.0


def test_the_deadline_covers_the_whole_redirect_chain(local_server) -> None:
    local_server.route("GET", "/one", Reply(302, headers={"Location": "/two"}, delay_s=0.3))
    local_server.route("GET", "/two", Reply(json={}, delay_s=0.3))
    with pytest.raises(EgressTimeout, match=r"timed out after 0\.45 s"):
        fetch(GuardedHttpClient(LOCAL), f"{local_server.url}/one", timeout_s=0.45)


def test_an_unresolvable_host_is_a_connect_error() -> None:
    with pytest.raises(EgressConnectError, match=r"^cannot resolve host nope\.invalid$"):
        fetch(GuardedHttpClient(EgressPolicy()), "http://nope.invalid/")


def test_a_closed_port_is_a_connect_error() -> None:
    with LocalServer() as server:
        port = server.port
    refused = r"^cannot connect to 127\.0\.0\.1: Connection refused$"
    with pytest.raises(EgressConnectError, match=refused):
        fetch(GuardedHttpClient(LOCAL), f"http://127.0.0.1:{port}/")


# --- pooling and loops ----------------------------------------------------------------


def test_sequential_requests_reuse_one_keep_alive_connection(local_server) -> None:
    local_server.route("GET", "/ping", Reply(json={"ok": True}))
    client = GuardedHttpClient(LOCAL)

    async def go():
        try:
            return [await client.request("GET", f"{local_server.url}/ping") for _ in range(3)]
        finally:
            await client.aclose()

    assert [r.status_code for r in asyncio.run(go())] == [200, 200, 200]
    assert local_server.connections == 1


def test_one_client_works_from_two_event_loops(local_server) -> None:
    local_server.route("GET", "/ping", Reply(json={"ok": True}))
    client = GuardedHttpClient(LOCAL)

    pools: list[httpx2.AsyncClient] = []

    async def twice():
        first = await client.request("GET", f"{local_server.url}/ping")
        second = await client.request("GET", f"{local_server.url}/ping")
        pools.append(await client._client())
        return first.status_code, second.status_code

    assert asyncio.run(twice()) == (200, 200)
    assert asyncio.run(twice()) == (200, 200)
    assert local_server.connections == 2  # one pooled connection per loop
    assert pools[0] is not pools[1]
    assert all(pool.is_closed for pool in pools)  # closed as each asyncio.run ended


def test_cookies_never_carry_over_between_requests(local_server) -> None:
    local_server.route("GET", "/login", Reply(headers={"Set-Cookie": "session=tenant-a; Path=/"}))
    local_server.route("GET", "/me", Reply(json={}))
    client = GuardedHttpClient(LOCAL)

    async def go():
        await client.request("GET", f"{local_server.url}/login")
        await client.request("GET", f"{local_server.url}/me")
        await client.aclose()

    asyncio.run(go())
    assert "cookie" not in local_server.requests[1].headers


# --- TLS ------------------------------------------------------------------------------


def make_certificate(host: str) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def test_tls_verifies_and_sends_sni_for_the_url_host_not_the_connected_ip(tmp_path) -> None:
    cert_pem, key_pem = make_certificate("localhost")
    (tmp_path / "cert.pem").write_bytes(cert_pem)
    (tmp_path / "key.pem").write_bytes(key_pem)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    sni_names: list[str | None] = []
    server_context.sni_callback = lambda _sock, name, _ctx: sni_names.append(name)
    client_context = ssl.create_default_context(cadata=cert_pem.decode())

    async def get(policy: EgressPolicy, url: str) -> httpx2.Response:
        transport = GuardedTransport(backend=GuardedBackend(policy), ssl_context=client_context)
        async with httpx2.AsyncClient(transport=transport, trust_env=False) as client:
            return await client.get(url)

    with LocalServer(ssl_context=server_context) as server:
        server.route("GET", "/secure", Reply(json={"tls": True}))
        by_name = asyncio.run(
            get(EgressPolicy(allowlist=("localhost",)), f"https://localhost:{server.port}/secure")
        )
        assert by_name.json() == {"tls": True}
        assert sni_names == ["localhost"]
        # The certificate names localhost, not 127.0.0.1: verification follows the URL host.
        with pytest.raises(httpx2.ConnectError, match="certificate verify failed"):
            asyncio.run(get(LOCAL, f"https://127.0.0.1:{server.port}/secure"))


def test_caller_headers_do_not_follow_a_redirect_to_another_origin(local_server) -> None:
    other = LocalServer()
    try:
        local_server.route("GET", "/same", Reply(302, headers={"Location": "/here"}))
        local_server.route("GET", "/here", Reply(json={}))
        local_server.route("GET", "/away", Reply(302, headers={"Location": f"{other.url}/there"}))
        other.route("GET", "/there", Reply(json={}))
        secret = {"X-Api-Key": "k-123", "Authorization": "Bearer t-456"}
        fetch(GuardedHttpClient(LOCAL), f"{local_server.url}/same", headers=secret)
        fetch(GuardedHttpClient(LOCAL), f"{local_server.url}/away", headers=secret)
        here = local_server.requests[1].headers
        assert here["x-api-key"] == "k-123" and here["authorization"] == "Bearer t-456"
        there = other.requests[0].headers
        assert "x-api-key" not in there and "authorization" not in there
        assert there["accept-encoding"] == "identity"  # compressed bombs are not invited
    finally:
        other.close()


def test_ipv4_translated_siit_forms_are_checked_like_their_ipv4_address() -> None:
    from tools.runtime.egress import refusal_reason

    assert refusal_reason(ipaddress.ip_address("::ffff:0:7f00:1")) == "loopback"
    assert refusal_reason(ipaddress.ip_address("::ffff:0:a00:1")) == "private"


def test_an_sdk_client_sized_for_its_callers_has_that_many_requests_in_flight_at_once(
    local_server,
) -> None:
    """A provider's client is sized to the runs a process runs at once (providers.services):
    past the pool's default of 100, requests must reach the server together, not queue."""
    from tools.runtime.egress import guarded_async_client

    local_server.route("GET", "/slow", Reply(json={"ok": True}, delay_s=10.0))
    wanted = 120

    async def all_at_once() -> int:
        async with guarded_async_client(LOCAL, max_connections=wanted) as client:
            calls = [
                asyncio.ensure_future(client.get(f"{local_server.url}/slow")) for _ in range(wanted)
            ]
            try:
                deadline = time.monotonic() + 9.0  # before the first answer comes back
                while len(local_server.requests) < wanted and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                return len(local_server.requests)
            finally:
                for call in calls:
                    call.cancel()
                await asyncio.gather(*calls, return_exceptions=True)

    assert asyncio.run(all_at_once()) == wanted

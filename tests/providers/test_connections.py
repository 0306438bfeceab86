"""Tenant provider connections: validation, write-only keys, adapters, tests, seeding."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection as db

from providers.models import HealthStatus, ProviderConnection
from providers.runtime.anthropic_adapter import AnthropicAdapter
from providers.runtime.offline import OfflineModel
from providers.runtime.openai_adapter import OpenAIAdapter
from providers.services import (
    adapter_for,
    connection_test,
    connections_for,
    default_connection,
    seed_demo_connection,
)
from tests.factories import login
from tests.fakes.provider_server import ErrorReply

KEY = "sk-ant-api03-TOPSECRETKEY"


def make(tenant, **fields) -> ProviderConnection:
    values = {"tenant": tenant, "name": "Claude", "kind": "anthropic", "api_key": KEY, **fields}
    connection = ProviderConnection(**values)
    connection.full_clean()
    connection.save()
    return connection


def errors_of(**fields) -> dict:
    with pytest.raises(ValidationError) as caught:
        ProviderConnection(**fields).full_clean()
    return caught.value.message_dict


def test_validation_names_the_field(trio):
    base = {"tenant": trio.acme, "name": "x"}
    assert "api_key" in errors_of(**base, kind="anthropic")
    assert "preset" in errors_of(**base, kind="openai_compatible", api_key="k")
    assert "api_key" in errors_of(**base, kind="openai_compatible", preset="groq")
    assert "base_url" in errors_of(**base, kind="openai_compatible", preset="custom")
    reserved = {"Authorization": "x"}
    assert "extra_headers" in errors_of(**base, kind="offline", extra_headers=reserved)
    assert "extra_headers" in errors_of(**base, kind="offline", extra_headers=["nope"])
    assert "default_model" in errors_of(
        **base, kind="offline", allowed_models=["a"], default_model="b"
    )
    ProviderConnection(**base, kind="openai_compatible", preset="ollama").full_clean()


def test_the_key_is_encrypted_and_never_in_reprs(trio):
    connection = make(trio.acme)
    with db.cursor() as cursor:
        cursor.execute("SELECT api_key FROM providers_providerconnection")
        assert KEY not in cursor.fetchone()[0]
    assert KEY not in repr(connection) and KEY not in str(connection)
    assert KEY not in repr(adapter_for(connection))


def test_adapters_for_each_kind_and_reuse(trio):
    claude = make(trio.acme)
    assert isinstance(adapter_for(claude), AnthropicAdapter)
    assert adapter_for(claude) is adapter_for(ProviderConnection.objects.get(pk=claude.pk))
    gpt = make(trio.acme, name="GPT", kind="openai", api_key="sk-x")
    assert isinstance(adapter_for(gpt), OpenAIAdapter)
    groq = make(trio.acme, name="Groq", kind="openai_compatible", preset="groq", api_key="g")
    assert adapter_for(groq).base_url == "https://api.groq.com/openai/v1"
    offline = make(trio.acme, name="Offline", kind="offline", api_key=None)
    assert isinstance(adapter_for(offline), OfflineModel)
    claude.default_model = "claude-x"
    claude.save()
    assert adapter_for(claude) is not adapter_for(offline)


def test_connection_test_stores_health(trio, provider_server, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    good = make(trio.acme, base_url=provider_server.anthropic_base_url)
    ok, message = connection_test(good)
    assert ok and message.startswith("Connected: 2 model(s)")
    good.refresh_from_db()
    assert good.health_status == HealthStatus.OK and good.last_checked_at

    provider_server.expect_api_key("a-different-key")
    ok, message = connection_test(good)
    assert not ok and "HTTP 401" in message and KEY not in message
    good.refresh_from_db()
    assert good.health_status == HealthStatus.FAILING


def test_compatible_servers_without_a_models_list_get_a_one_token_request(
    trio, provider_server, settings
):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    provider_server.serve_models_list = False
    local = make(
        trio.acme, name="vLLM", kind="openai_compatible", preset="vllm", api_key=None,
        base_url=provider_server.openai_base_url, default_model="served-model",
    )  # fmt: skip
    ok, message = connection_test(local)
    assert ok and message == "Connected: served-model-20250101 answered."
    sent = provider_server.requests_to("/v1/chat/completions")[0].body
    assert sent["model"] == "served-model" and sent["max_tokens"] == 1


def test_a_private_base_url_is_refused_unless_allow_listed(trio, provider_server, settings):
    settings.EGRESS_ALLOWLIST = []
    connection = make(trio.acme, base_url=provider_server.anthropic_base_url, max_retries=0)
    ok, message = connection_test(connection)
    assert not ok and "127.0.0.1 is not allowed" in message
    assert provider_server.received == []


@pytest.mark.parametrize(
    ("kind", "preset", "base_url"),
    [
        ("openai", "", "http://127.0.0.1:9/v1"),
        ("anthropic", "", "http://10.0.0.1"),
        ("openai_compatible", "custom", "http://localhost:9/v1"),
        ("openai_compatible", "vllm", "http://169.254.169.254/v1"),
    ],
)
def test_a_refused_base_url_reads_clearly_on_every_kind(trio, settings, kind, preset, base_url):
    settings.EGRESS_ALLOWLIST = []
    connection = make(trio.acme, kind=kind, preset=preset, base_url=base_url, max_retries=3)
    ok, message = connection_test(connection)
    assert not ok and message.startswith("This address is not allowed: ")
    assert "Egress" not in message and KEY not in message
    connection.refresh_from_db()
    assert connection.health_status == HealthStatus.FAILING


def test_the_admin_test_page_shows_a_refused_address(client, trio, settings):
    settings.EGRESS_ALLOWLIST = []
    connection = make(trio.acme, name="GPT", kind="openai", base_url="http://127.0.0.1:9/v1")
    login(client, trio.alice)
    page = client.post(f"/admin/providers/providerconnection/{connection.pk}/test/", follow=True)
    assert page.status_code == 200
    assert "GPT: This address is not allowed: " in page.content.decode()


def test_unreachable_provider_reads_clearly(trio, settings):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    connection = make(trio.acme, base_url="http://127.0.0.1:9", max_retries=0)
    ok, message = connection_test(connection)
    assert not ok and "cannot reach Anthropic" in message


def test_platform_keys_are_offered_only_when_allowed(trio, settings):
    settings.PLATFORM_PROVIDER_KEYS = {"anthropic": "sk-platform", "groq": "gsk-platform"}
    settings.PLATFORM_PROVIDERS_FOR_TENANTS = False
    assert connections_for(trio.acme) == [] and default_connection(trio.acme) is None
    settings.PLATFORM_PROVIDERS_FOR_TENANTS = True
    shared = connections_for(trio.acme)
    kinds = [(c.kind, c.preset) for c in shared]
    assert kinds == [("anthropic", ""), ("openai_compatible", "groq")]
    assert all(c.pk is None for c in shared)
    own = make(trio.acme, is_default=True)
    assert default_connection(trio.acme) == own


def test_demo_seeding_uses_a_platform_key_or_the_offline_model(trio, settings):
    settings.PLATFORM_PROVIDER_KEYS = {}
    assert seed_demo_connection(trio.acme).kind == "offline"
    settings.PLATFORM_PROVIDER_KEYS = {"openai": "sk-demo"}
    seeded = seed_demo_connection(trio.globex)
    assert (seeded.kind, seeded.api_key, seeded.is_default) == ("openai", "sk-demo", True)
    assert seed_demo_connection(trio.globex) == seeded  # kept
    settings.PLATFORM_PROVIDER_KEYS = {"anthropic": "sk-ant-now"}  # a key arrives later
    upgraded = seed_demo_connection(trio.acme)
    assert (upgraded.kind, upgraded.is_default) == ("anthropic", True)
    assert default_connection(trio.acme) == upgraded


def admin_form(**overrides) -> dict:
    data = {
        "name": "Claude",
        "kind": "anthropic",
        "preset": "",
        "base_url": "",
        "api_key": KEY,
        "extra_headers": "{}",
        "default_model": "claude-test",
        "allowed_models": "",
        "timeout_s": "60",
        "max_retries": "3",
    }
    data.update(overrides)
    return data


def test_admin_keeps_the_key_write_only(client, trio):
    login(client, trio.alice)
    assert client.post("/admin/providers/providerconnection/add/", admin_form()).status_code == 302
    connection = ProviderConnection.objects.get()
    page = client.get(f"/admin/providers/providerconnection/{connection.pk}/change/").content
    assert KEY.encode() not in page and b"API key stored" in page
    client.post(
        f"/admin/providers/providerconnection/{connection.pk}/change/",
        admin_form(api_key="", default_model="claude-2"),
    )
    connection.refresh_from_db()
    assert (connection.api_key, connection.default_model) == (KEY, "claude-2")
    missing = client.post(
        "/admin/providers/providerconnection/add/", admin_form(name="B", api_key="")
    )
    assert b"An API key is required." in missing.content


def test_admin_test_connection_shows_the_result_without_the_key(
    client, trio, provider_server, settings
):
    settings.EGRESS_ALLOWLIST = ["127.0.0.1/32"]
    provider_server.script("anthropic", ErrorReply(401, "invalid x-api-key"))
    provider_server.expect_api_key("other")
    connection = make(trio.acme, base_url=provider_server.anthropic_base_url)
    login(client, trio.alice)
    url = f"/admin/providers/providerconnection/{connection.pk}/test/"
    confirm = client.get(url)  # asks only: no call, nothing recorded
    assert confirm.status_code == 200 and b'method="post"' in confirm.content
    connection.refresh_from_db()
    assert connection.last_checked_at is None and provider_server.received == []
    page = client.post(url, follow=True)
    body = page.content.decode()
    assert "Claude: Anthropic answered HTTP 401" in body and KEY not in body
    assert "Failing" in client.get("/admin/providers/providerconnection/").content.decode()


def test_another_tenants_connection_is_404_in_the_admin(client, trio):
    theirs = make(trio.globex)
    login(client, trio.alice)
    assert client.get(f"/admin/providers/providerconnection/{theirs.pk}/change/").status_code == 404
    assert client.get(f"/admin/providers/providerconnection/{theirs.pk}/test/").status_code == 404
    assert client.post(f"/admin/providers/providerconnection/{theirs.pk}/test/").status_code == 404

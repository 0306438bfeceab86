"""Model aliases over REST (/api/v1/model-aliases), per role: the tenant's admin creates,
changes and deletes them (a connection not the tenant's, a model it does not allow, a
mixed API refused with a 400 naming `targets`), a member reads but may not write, another
tenant's alias is a 404, and without credentials a 401."""

from __future__ import annotations

import json

import pytest

from providers.models import ModelAlias
from tests.api.test_resources import Api, as_key, assert_error
from tests.factories import login, make_connection

TARGETS = [{"connection": "Main", "model": "m"}, {"connection": "Backup", "model": ""}]


@pytest.fixture
def connections(trio):
    make_connection(trio.acme, "Main", "openai", api_key="k1", default_model="m")
    make_connection(trio.acme, "Backup", "openai", api_key="k2", default_model="b")
    make_connection(trio.acme, "Claude", "anthropic", api_key="k3", default_model="c")
    make_connection(trio.acme, "Limited", "openai", api_key="k4", allowed_models=["only"])
    make_connection(trio.globex, "Theirs", "openai", api_key="k5", default_model="t")


def test_an_admin_creates_changes_and_deletes_an_alias(client, trio, connections):
    api = as_key(client, trio.acme)
    created = api.post("/model-aliases", {"name": "chat", "targets": TARGETS})
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    assert created.json()["targets"] == TARGETS and created.json()["load_balancing"] == ""
    changed = api.patch(f"/model-aliases/{pk}", {"load_balancing": "round_robin"})
    assert changed.status_code == 200 and changed.json()["load_balancing"] == "round_robin"
    assert [a["name"] for a in api.get("/model-aliases").json()["results"]] == ["chat"]
    assert api.delete(f"/model-aliases/{pk}").status_code == 204
    assert not ModelAlias.objects.exists()


@pytest.mark.parametrize(
    ("targets", "said"),
    [
        ([], "at least one"),
        ([{"connection": "Theirs", "model": "t"}], "unknown connection 'Theirs'"),
        ([{"connection": "Limited", "model": "other"}], "does not allow"),
        ([{"connection": "Main"}, {"connection": "Claude"}], "cannot be mixed"),
        ("Main/m", "list"),
        ([{"connection": "Main", "weight": 2}], "Each fallback"),
    ],
)
def test_bad_targets_are_a_400_naming_them(client, trio, connections, targets, said):
    api = as_key(client, trio.acme)
    error = assert_error(api.post("/model-aliases", {"name": "chat", "targets": targets}), 400)
    assert said in str(error["details"]["targets"])
    assert not ModelAlias.objects.exists()


def test_a_bad_name_is_a_400(client, trio, connections):
    api = as_key(client, trio.acme)
    error = assert_error(api.post("/model-aliases", {"name": "Has Space", "targets": TARGETS}), 400)
    assert "name" in error["details"]


def test_a_member_reads_but_may_not_write(client, trio, connections):
    alias = ModelAlias.objects.create(tenant=trio.acme, name="chat", targets=TARGETS)
    login(client, trio.bob)
    api = Api(client, tenant_header=trio.acme.slug)
    assert api.get(f"/model-aliases/{alias.pk}").status_code == 200
    assert api.patch(f"/model-aliases/{alias.pk}", {"name": "mine"}).status_code == 403
    assert api.post("/model-aliases", {"name": "x", "targets": TARGETS}).status_code == 403


def test_another_tenants_alias_is_a_404(client, trio, connections):
    alias = ModelAlias.objects.create(tenant=trio.acme, name="chat", targets=TARGETS)
    api = as_key(client, trio.globex)
    assert_error(api.get(f"/model-aliases/{alias.pk}"), 404)
    assert_error(api.patch(f"/model-aliases/{alias.pk}", {"name": "mine"}), 404)
    assert_error(api.delete(f"/model-aliases/{alias.pk}"), 404)


def test_without_credentials_it_is_a_401(client, trio):
    assert Api(client).get("/model-aliases").status_code == 401


def test_the_admin_edits_aliases_of_its_tenant_only(client, trio, connections):
    theirs = ModelAlias.objects.create(
        tenant=trio.globex, name="theirs", targets=[{"connection": "Theirs", "model": "t"}]
    )
    login(client, trio.alice)
    page = client.get("/admin/providers/modelalias/add/")
    assert page.status_code == 200 and 'name="targets"' in page.content.decode()
    refused = client.post(
        "/admin/providers/modelalias/add/",
        {"name": "chat", "targets": '[{"connection": "Theirs", "model": "t"}]'},
    )
    assert refused.status_code == 200
    assert "unknown connection" in str(refused.context["adminform"].form.errors["targets"])
    created = client.post(
        "/admin/providers/modelalias/add/",
        {"name": "chat", "targets": json.dumps(TARGETS), "load_balancing": "least_in_flight"},
    )
    assert created.status_code == 302
    alias = ModelAlias.objects.get(tenant=trio.acme)
    assert alias.targets == TARGETS and alias.load_balancing == "least_in_flight"
    assert client.get(f"/admin/providers/modelalias/{theirs.pk}/change/").status_code in (
        302,
        404,
    )

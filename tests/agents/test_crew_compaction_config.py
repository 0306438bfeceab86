"""A crew's compaction settings (threshold, summarising connection and model): the rules an
agent's follow, on the crew's page, over REST, in the admin's model, in the configuration
document and in its versions."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from agents.config_document import config_export, config_import
from agents.conversations import CompactionSettings, threshold_of
from agents.models import Crew
from agents.services import crew_save
from tenancy.records import history
from tests.api.test_resources import as_key, assert_error
from tests.factories import login, make_agent, make_connection, make_crew
from tests.web.test_config import url


@pytest.fixture
def mini(trio):
    return make_connection(
        trio.acme, "Mini", "openai", api_key="sk-mini", default_model="gpt-mini",
        allowed_models=["gpt-mini"],
    )  # fmt: skip


def test_a_crews_empty_settings_are_the_defaults_and_a_hierarchical_crews_win_where_set(
    trio, mini, settings
):
    settings.HISTORY_TOKEN_BUDGET = 12_000
    crew = make_crew(trio.acme, "team")
    assert threshold_of(crew) == 12_000
    own = CompactionSettings.of(crew)
    assert (own.connection, own.model, own.agent_id) == (None, "", None)

    boss = make_agent(trio.acme, "boss", compaction_threshold=5000, compaction_model="gpt-x")
    managers = CompactionSettings.of(boss)
    assert CompactionSettings.of(crew).over(managers) == managers  # nothing set: the manager's
    crew.compaction_threshold = 3000
    crew.compaction_connection = mini  # its own connection: not the manager's model with it
    merged = CompactionSettings.of(crew).over(managers)
    assert (merged.threshold, merged.connection, merged.model, merged.agent_id) == (
        3000,
        mini,
        "",
        boss.pk,
    )
    crew.compaction_connection, crew.compaction_model = None, "gpt-y"
    assert CompactionSettings.of(crew).over(managers).model == "gpt-y"


def test_the_model_refuses_bounds_and_another_tenants_connection(trio):
    crew = make_crew(trio.acme, "team")
    for threshold in (999, 2_000_001):
        crew.compaction_threshold = threshold
        with pytest.raises(ValidationError) as refused:
            crew.full_clean()
        assert "compaction_threshold" in refused.value.message_dict
    crew.compaction_threshold = 1000
    crew.compaction_connection = make_connection(trio.globex, "Theirs", "offline")
    with pytest.raises(ValidationError) as refused:
        crew.full_clean()
    assert refused.value.message_dict["compaction_connection"] == [
        "Choose one of this tenant's connections."
    ]


def test_rest_sets_and_refuses_a_crews_compaction_settings(client, trio, mini):
    api = as_key(client, trio.acme)
    created = api.post(
        "/crews",
        {"slug": "long", "name": "Long", "compaction_threshold": 5000,
         "compaction_connection": mini.pk, "compaction_model": "gpt-mini"},
    )  # fmt: skip
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["compaction_threshold"], body["compaction_connection"]) == (5000, mini.pk)
    assert body["compaction_model"] == "gpt-mini"
    bad = api.patch("/crews/long", {"compaction_threshold": 10})
    assert "compaction_threshold" in assert_error(bad, 400)["details"]
    theirs = make_connection(trio.globex, "Theirs", "offline")
    bad = api.patch("/crews/long", {"compaction_connection": theirs.pk})
    assert "compaction_connection" in assert_error(bad, 400)["details"]
    bad = api.patch("/crews/long", {"compaction_model": "gpt-huge"})  # not allowed there
    assert assert_error(bad, 400)["details"] == {
        "compaction_model": ["the connection does not allow this model"]
    }
    crew = Crew.objects.get(tenant=trio.acme, slug="long")
    assert (crew.compaction_threshold, crew.compaction_connection, crew.compaction_model) == (
        5000,
        mini,
        "gpt-mini",
    )


def crew_data(**extra) -> dict:
    return {
        "name": "Writers", "slug": "writers", "mode": "sequential", "manager": "",
        "max_delegations": "10", "max_depth": "3", "active": "on",
        "compaction_threshold": "", "compaction_connection": "", "compaction_model": "",
        **extra,
    }  # fmt: skip


def test_the_crew_page_sets_and_refuses_the_compaction_settings(client, trio, mini):
    login(client, trio.alice)
    page = client.get(url("crew_create")).content.decode()
    assert "Long conversations" in page and 'name="compaction_threshold"' in page
    assert "The tenant&#x27;s default connection" in page
    data = crew_data(compaction_threshold="4000", compaction_connection=str(mini.pk))
    assert client.post(url("crew_create"), data).status_code == 302
    crew = Crew.objects.get(tenant=trio.acme, slug="writers")
    assert (crew.compaction_threshold, crew.compaction_connection) == (4000, mini)
    edit = url("crew_edit", slug="writers")
    refused = client.post(edit, {**data, "compaction_threshold": "5"})
    assert refused.status_code == 400 and "Between 1,000 and 2,000,000" in refused.content.decode()
    theirs = make_connection(trio.globex, "Theirs", "offline")
    refused = client.post(edit, {**data, "compaction_connection": str(theirs.pk)})
    assert refused.status_code == 400 and b"id_compaction_connection_error" in refused.content
    crew.refresh_from_db()
    assert (crew.compaction_threshold, crew.compaction_connection) == (4000, mini)


def test_the_admin_sets_a_crews_compaction_settings_of_this_tenants_connections_only(
    client, trio, mini
):
    crew = make_crew(trio.acme, "team")
    login(client, trio.alice)
    change = f"/admin/agents/crew/{crew.pk}/change/"
    page = client.get(change).content.decode()
    assert "Long conversations" in page and 'name="compaction_threshold"' in page
    data = {
        "slug": "team", "name": "Team", "mode": "sequential", "active": "on",
        "max_delegations": "10", "max_depth": "3", "token_budget": "",
        "compaction_threshold": "3000", "compaction_model": "",
        "members-TOTAL_FORMS": "0", "members-INITIAL_FORMS": "0",
        "members-MIN_NUM_FORMS": "0", "members-MAX_NUM_FORMS": "1000",
    }  # fmt: skip
    theirs = make_connection(trio.globex, "Theirs", "offline")
    refused = client.post(change, {**data, "compaction_connection": str(theirs.pk)})
    assert refused.status_code == 200 and "compaction_connection" in refused.content.decode()
    saved = client.post(change, {**data, "compaction_connection": str(mini.pk)})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    crew.refresh_from_db()
    assert (crew.compaction_threshold, crew.compaction_connection) == (3000, mini)


def test_the_document_exports_imports_and_checks_a_crews_compaction_settings(trio, mini):
    make_crew(trio.acme, "long", compaction_threshold=6000, compaction_connection=mini)
    [entry] = [c for c in config_export(tenant=trio.acme)["crews"] if c["slug"] == "long"]
    assert entry["compaction"] == {"threshold": 6000, "connection": "Mini", "model": ""}

    document = {
        "version": 1,
        "connections": [{"name": "local", "kind": "offline", "default_model": "offline-demo",
                         "allowed_models": ["offline-demo"]}],
        "agents": [{"slug": "helper", "name": "Helper", "connection": "local"}],
        "crews": [{"slug": "team", "name": "Team", "members": ["helper"],
                   "compaction": {"threshold": 10, "connection": "nowhere", "model": ""}}],
    }  # fmt: skip
    plan = config_import(tenant=trio.globex, text=json.dumps(document))
    assert {p.path for p in plan.problems} == {"crews[0].compaction.threshold"}
    compaction = document["crews"][0]["compaction"]
    compaction["threshold"] = 2000
    plan = config_import(tenant=trio.globex, text=json.dumps(document))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("crews[0].compaction.connection", "unknown connection 'nowhere'")
    ]
    compaction.update(connection="local", model="gpt-4o")
    plan = config_import(tenant=trio.globex, text=json.dumps(document))
    assert [(p.path, p.reason) for p in plan.problems] == [
        ("crews[0].compaction.model", "the connection does not allow this model")
    ]
    assert not Crew.objects.filter(tenant=trio.globex).exists()  # refused: nothing written
    compaction["model"] = ""
    plan = config_import(tenant=trio.globex, text=json.dumps(document))
    assert not plan.problems and plan.applied
    team = Crew.objects.get(tenant=trio.globex, slug="team")
    assert team.compaction_threshold == 2000 and team.compaction_connection.name == "local"


def test_a_crews_versions_hold_its_compaction_settings(trio, mini):
    crew = crew_save(tenant=trio.acme, changes={"slug": "team", "name": "Team"})
    crew_save(
        tenant=trio.acme, crew=crew,
        changes={"compaction_threshold": 3000, "compaction_connection": mini},
    )  # fmt: skip
    first, second = history.versions(trio.acme, crew).order_by("number")
    assert first.snapshot["fields"]["compaction_threshold"] is None
    assert second.snapshot["fields"]["compaction_connection"] == mini.pk
    assert second.changes == {
        "compaction_threshold": [None, 3000],
        "compaction_connection": [None, mini.pk],
    }
    history.restore(tenant=trio.acme, instance=crew, number=1)
    crew.refresh_from_db()
    assert (crew.compaction_threshold, crew.compaction_connection) == (None, None)

from __future__ import annotations

from agents.models import Crew, CrewMember
from tests.factories import login, make_agent


def test_a_tenant_admin_builds_a_crew_with_ordered_members(client, trio):
    a, b = make_agent(trio.acme, "a"), make_agent(trio.acme, "b")
    theirs = make_agent(trio.globex, "spy")
    login(client, trio.alice)
    form = client.get("/admin/agents/crew/add/").content.decode()
    assert "Spy" not in form
    data = {
        "slug": "team", "name": "Team", "mode": "sequential", "active": "on",
        "max_delegations": "10", "max_depth": "3", "token_budget": "",
        "members-TOTAL_FORMS": "2", "members-INITIAL_FORMS": "0",
        "members-MIN_NUM_FORMS": "0", "members-MAX_NUM_FORMS": "1000",
        "members-0-position": "1", "members-0-agent": b.pk,
        "members-1-position": "0", "members-1-agent": a.pk,
    }  # fmt: skip
    response = client.post("/admin/agents/crew/add/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    crew = Crew.objects.get(slug="team")
    assert crew.tenant == trio.acme
    assert [m.agent.slug for m in CrewMember.objects.filter(crew=crew)] == ["a", "b"]
    assert all(m.tenant_id == trio.acme.pk for m in CrewMember.objects.filter(crew=crew))
    data.update({"slug": "team2", "members-0-agent": theirs.pk})
    assert client.post("/admin/agents/crew/add/", data).status_code == 200  # refused
    hierarchical = {**data, "slug": "h", "mode": "hierarchical", "members-0-agent": b.pk}
    response = client.post("/admin/agents/crew/add/", hierarchical)
    assert "needs a manager agent" in response.content.decode()

"""REST: `/skills` — upload (a new version each, identical content the same), read, approve;
the policy (read needs `read`, writes `config`), a clear 400 for every bad package, 404
across tenants."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.api.test_resources import V1, as_key, assert_error

pytestmark = pytest.mark.django_db


def skill_zip(body: str = "Fill the form.", **extra: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("SKILL.md", f"---\nname: pdf-forms\ndescription: Forms.\n---\n{body}\n")
        archive.writestr("references/fields.md", "# Fields")
        for path, content in extra.items():
            archive.writestr(path, content)
    return out.getvalue()


def upload(api, data: bytes, name: str = "skill.zip"):
    return api._record(
        api.client.post(f"{V1}/skills", {"file": SimpleUploadedFile(name, data)}, **api._headers())
    )


def test_upload_read_and_approve(client, trio):
    api = as_key(client, trio.acme, "read", "config")
    first = upload(api, skill_zip())
    assert first.status_code == 201, first.content
    assert first.json()["number"] == 1 and first.json()["status"] == "draft"
    assert upload(api, skill_zip()).status_code == 200  # identical: the same version
    assert upload(api, skill_zip("v2")).json()["number"] == 2
    listed = api.get("/skills").json()
    assert listed == [
        {"name": "pdf-forms", "description": "Forms.", "versions": 2, "latest_approved": None}
    ]
    approved = api.post("/skills/pdf-forms/versions/1/approve", {})
    assert approved.status_code == 200, approved.content
    assert approved.json()["status"] == "approved"
    detail = api.get("/skills/pdf-forms").json()
    assert [(v["number"], v["status"]) for v in detail["versions"]] == [
        (2, "draft"),
        (1, "approved"),
    ]
    version = api.get("/skills/pdf-forms/versions/1").json()
    assert version["instructions"] == "Fill the form."
    assert version["files"] == [
        {"path": "SKILL.md", "size": len("---\nname: pdf-forms\ndescription: Forms.\n---\n") + 15},
        {"path": "references/fields.md", "size": 8},
    ]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"not a zip", "not a readable zip"),
        (skill_zip(**{"../../etc/x": "x"}), "../../etc/x"),
        (skill_zip(**{"big.bin": "\0" * (2 * 1024 * 1024)}), "big.bin: larger than 1 MB"),
    ],
)
def test_a_bad_package_is_a_clear_400_and_stores_nothing(client, trio, data, expected):
    api = as_key(client, trio.acme, "read", "config")
    error = assert_error(upload(api, data), 400)
    assert expected in str(error["details"]) or expected in error["message"]
    assert api.get("/skills").json() == []


def test_reading_needs_read_and_writing_config(client, trio):
    reader = as_key(client, trio.acme, "read")
    assert reader.get("/skills").status_code == 200
    assert_error(upload(reader, skill_zip()), 403)
    admin = as_key(client, trio.acme, "read", "config")
    upload(admin, skill_zip())
    assert_error(reader.post("/skills/pdf-forms/versions/1/approve", {}), 403)


def test_another_tenants_skill_answers_404(client, trio):
    upload(as_key(client, trio.acme, "read", "config"), skill_zip())
    outsider = as_key(client, trio.globex, "read", "config")
    assert outsider.get("/skills").json() == []
    assert_error(outsider.get("/skills/pdf-forms"), 404)
    assert_error(outsider.get("/skills/pdf-forms/versions/1"), 404)
    assert_error(outsider.post("/skills/pdf-forms/versions/1/approve", {}), 404)
    assert_error(outsider.get("/skills/pdf-forms/versions/x"), 404)


def test_an_agent_pins_skills_through_its_resource(client, trio):
    api = as_key(client, trio.acme, "read", "config")
    upload(api, skill_zip())
    created = api.post("/agents", {"slug": "writer", "name": "Writer"})
    assert created.status_code == 201, created.content
    assert created.json()["skills"] == []
    refused = api.patch("/agents/writer", {"skills": ["pdf-forms"], "name": "Renamed"})
    error = assert_error(refused, 400)
    assert "no approved version yet" in str(error["details"])
    assert api.get("/agents/writer").json()["name"] == "Writer"  # nothing changed
    api.post("/skills/pdf-forms/versions/1/approve", {})
    pinned = api.patch("/agents/writer", {"skills": ["pdf-forms@1"]})
    assert pinned.status_code == 200, pinned.content
    assert pinned.json()["skills"] == ["pdf-forms@1"]
    assert api.patch("/agents/writer", {"skills": ["pdf-forms@x"]}).status_code == 400
    assert api.patch("/agents/writer", {"skills": ["pdf-forms@latest"]}).json()["skills"] == [
        "pdf-forms@latest"
    ]


def test_the_agents_list_reads_every_agents_skills_in_a_fixed_number_of_queries(client, trio):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.factories import make_agent

    api = as_key(client, trio.acme, "read", "config")
    upload(api, skill_zip())
    assert api.post("/skills/pdf-forms/versions/1/approve", {}).status_code == 200

    def listed() -> tuple[list, int]:
        with CaptureQueriesContext(connection) as queries:
            response = api.get("/agents")
        assert response.status_code == 200, response.content
        return [(a["slug"], a["skills"]) for a in response.json()["results"]], len(queries)

    for slug in ("one", "two", "three"):
        make_agent(trio.acme, slug)
        pinned = api.patch(f"/agents/{slug}", {"skills": ["pdf-forms@1"]})
        assert pinned.status_code == 200, pinned.content
        if slug == "one":
            first, one_agent = listed()
    everyone, three_agents = listed()
    assert first == [("one", ["pdf-forms@1"])]
    assert sorted(everyone) == [(s, ["pdf-forms@1"]) for s in ("one", "three", "two")]
    assert three_agents == one_agent

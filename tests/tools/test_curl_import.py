"""Pasted curl commands (as public API docs give them) into HTTP tool drafts
(tools/runtime/imports/curl.py): no database, no network."""

from __future__ import annotations

import json

import pytest

from tools.runtime.credential_leaks import credential_like
from tools.runtime.http_tool import HttpToolConfig
from tools.runtime.imports import ImportRefused
from tools.runtime.imports.curl import MAX_COMMAND_CHARS, MAX_HEADERS, parse_curl

GITHUB = """curl -L \\
  -H "Accept: application/vnd.github+json" \\
  -H "Authorization: Bearer ghp_16C7e42F292c6912E7710c838347Ae178B4a" \\
  -H "X-GitHub-Api-Version: 2022-11-28" \\
  https://api.github.com/repos/OWNER/REPO/issues/42"""
STRIPE = """curl https://api.stripe.com/v1/customers \\
  -u "sk_test_4eC39HqLyjWDarjtT1zdp7dc:" \\
  -d name="Jenny Rosen" \\
  --data-urlencode email="jenny.rosen@example.com" \\
  -d "metadata[order_id]"=6735"""
OPENAI = """curl https://api.openai.com/v1/chat/completions \\
  -H "Content-Type: application/json" \\
  -H "Authorization: Bearer $OPENAI_API_KEY" \\
  -d '{
    "model": "gpt-4o",
    "messages": [{"role": "user", "content": "Hello!"}],
    "temperature": 0.7
  }'"""


def draft_of(command: str, **kwargs):
    found = parse_curl(command, **kwargs)
    HttpToolConfig.model_validate(found.draft.config)  # a config the tool accepts
    return found


def test_a_github_call_with_its_path_values_marked_becomes_typed_path_arguments():
    marks = {"path.OWNER": "owner", "path.REPO": {"name": "repo"}, "path.42": "issue_number"}
    found = draft_of(GITHUB, marks=marks)
    draft = found.draft
    assert draft.name == "get_repos_issues" and draft.source == "curl"
    assert draft.config["method"] == "GET"
    assert (
        draft.config["url"] == "https://api.github.com/repos/{owner}/{repo}/issues/{issue_number}"
    )
    assert draft.config["auth"] == {"type": "bearer"}
    assert draft.config["fixed"] == {
        "headers": {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
    }
    assert draft.input_schema["properties"]["issue_number"] == {"type": "integer", "examples": [42]}
    assert draft.input_schema["required"] == ["owner", "repo", "issue_number"]
    assert found.secret == "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    assert found.secret not in json.dumps(draft.definition_fields())
    assert any("-L" in note for note in draft.notes)


def test_a_stripe_form_with_the_key_as_user_is_sent_as_json_with_the_key_whole():
    found = draft_of(STRIPE, marks={"body.email": {"name": "email", "description": "Theirs."}})
    config = found.draft.config
    assert config["method"] == "POST"
    assert config["fixed"]["body"] == {"name": "Jenny Rosen", "metadata[order_id]": "6735"}
    assert config["arguments"] == [{"argument": "email", "to": "body"}]
    # `-u key:` (no password) is sent as the same Authorization header, the key its secret.
    assert config["auth"] == {"type": "header", "header": "Authorization"}
    assert found.secret.startswith("Basic ")
    assert "sk_test" not in json.dumps(found.draft.definition_fields())
    assert any("form" in note for note in found.draft.notes)


def test_an_openai_json_body_keeps_its_types_and_an_env_variable_is_no_secret():
    found = draft_of(OPENAI, marks={"body.messages": "messages", "body.temperature": "temperature"})
    config = found.draft.config
    assert config["fixed"]["body"] == {"model": "gpt-4o"}
    properties = found.draft.input_schema["properties"]
    assert properties["messages"]["type"] == "array"
    assert properties["temperature"] == {"type": "number", "examples": [0.7]}
    assert config["auth"] == {"type": "bearer"}
    assert found.secret is None
    assert any("$OPENAI_API_KEY" in note for note in found.draft.notes)


def test_get_with_data_puts_the_data_in_the_query_and_an_api_key_header_is_the_auth():
    command = "curl -G https://api.example.com/weather -d city=Paris -d units=metric " \
        "--data-urlencode 'q=two words' -H 'X-API-Key: k-123'"  # fmt: skip
    found = draft_of(command, marks={"query.city": "city"})
    config = found.draft.config
    assert config["method"] == "GET"
    assert config["fixed"] == {"query": {"units": "metric", "q": "two words"}}
    assert config["arguments"] == [{"argument": "city", "to": "query"}]
    assert config["auth"] == {"type": "header", "header": "X-API-Key"}
    assert found.secret == "k-123"


def test_basic_auth_with_a_password_keeps_the_user_name_and_returns_the_password():
    marks = {"path.7": "item_id", "query.hard": {"name": "hard", "required": False}}
    command = "curl -u alice:s3cret -X DELETE 'https://api.example.com/v2/items/7?hard=true'"
    found = draft_of(command, marks=marks)
    config = found.draft.config
    assert config["auth"] == {"type": "basic", "username": "alice"}
    assert found.secret == "s3cret"
    assert config["method"] == "DELETE"
    assert config["url"] == "https://api.example.com/v2/items/{item_id}"
    assert found.draft.input_schema["properties"]["hard"]["type"] == "boolean"
    assert found.draft.input_schema["required"] == ["item_id"]


@pytest.mark.parametrize(
    ("command", "method", "auth"),
    [
        # Slack's Web API: a bot token, a JSON body
        ("curl -X POST -H 'Authorization: Bearer xoxb-1-2-abc' -H 'Content-type: "
         "application/json; charset=utf-8' --data '{\"channel\":\"C123\",\"text\":\"Hi\"}' "
         "https://slack.com/api/chat.postMessage", "POST", {"type": "bearer"}),
        # Anthropic's Messages API: x-api-key, --json
        ("curl https://api.anthropic.com/v1/messages --header 'x-api-key: sk-ant-1' "
         "--header 'anthropic-version: 2023-06-01' --json '{\"model\": \"claude\", "
         "\"max_tokens\": 64}'", "POST", {"type": "header", "header": "x-api-key"}),
        # GitLab: PRIVATE-TOKEN
        ("curl --header 'PRIVATE-TOKEN: glpat-xyz' "
         "'https://gitlab.example.com/api/v4/projects?per_page=5'", "GET",
         {"type": "header", "header": "PRIVATE-TOKEN"}),
        # Discord: a non-standard Authorization scheme is sent whole
        ("curl -X PATCH -H 'Authorization: Bot abc.def' -H 'Content-Type: application/json' "
         "-d '{\"name\": \"x\"}' https://discord.com/api/v10/channels/99", "PATCH",
         {"type": "header", "header": "Authorization"}),
        # Twilio style: --data-urlencode and -u SID:token, PUT-free form POST
        ("curl -X POST https://api.twilio.com/2010-04-01/Accounts/AC1/Messages.json "
         "--data-urlencode 'Body=Hello there' --data-urlencode 'To=+15558675310' "
         "-u AC1:authtoken", "POST", {"type": "basic", "username": "AC1"}),
        # Mailgun-ish PUT with --oauth2-bearer, and -sS/--compressed left out
        ("curl -sS --compressed --oauth2-bearer tok-1 -X PUT https://api.example.com/v1/lists/a "
         "--data-raw '{\"name\": \"A\"}'", "PUT", {"type": "bearer"}),
    ],
)  # fmt: skip
def test_public_api_examples_parse_into_drafts_without_their_secret(command, method, auth):
    found = draft_of(command)
    assert found.draft.config["method"] == method
    assert found.draft.config["auth"] == auth
    assert found.secret
    assert found.secret not in json.dumps(found.draft.definition_fields())
    assert found.secret not in " ".join(found.draft.notes)


def test_a_credential_in_the_query_is_left_out_with_a_note():
    found = draft_of("curl 'https://maps.example.com/geocode/json?address=Paris&key=AIzaSy123'")
    assert found.draft.config["fixed"] == {"query": {"address": "Paris"}}
    assert "AIzaSy123" not in json.dumps(found.draft.definition_fields())
    assert any("'key'" in note for note in found.draft.notes)


SECRETISH = "abcd1234secret"


@pytest.mark.parametrize(
    "header",
    ["X-RapidAPI-Key", "DD-API-KEY", "X-Algolia-API-Key", "X-Shopify-Access-Token",
     "Private-Token", "X-Auth-Token", "x-api-key", "apiKey", "X-Amz-Security-Token",
     "X-Session-Id", "Ocp-Apim-Subscription-Key"],
)  # fmt: skip
def test_a_header_named_as_a_credential_becomes_the_auth_and_its_value_the_secret(header):
    found = draft_of(f"curl -H '{header}: {SECRETISH}' https://api.example.com/v1/things")
    assert found.draft.config["auth"] == {"type": "header", "header": header}
    assert found.secret == SECRETISH
    assert "fixed" not in found.draft.config
    assert SECRETISH not in json.dumps([found.draft.definition_fields(), found.places])


@pytest.mark.parametrize(
    "parameter", ["appid", "api_key", "access_token", "key", "apiKey", "client_secret", "sig"]
)
def test_a_query_parameter_named_as_a_credential_is_left_out_never_kept(parameter):
    # (OpenWeather's ?appid=, Google's ?key=): a tool has no way to send a secret in the query
    found = draft_of(
        f"curl 'https://api.example.com/data/2.5/weather?q=London&{parameter}={SECRETISH}'"
    )
    draft = found.draft
    assert draft.config["fixed"] == {"query": {"q": "London"}}
    assert "auth" not in draft.config and found.secret is None
    assert SECRETISH not in json.dumps([draft.definition_fields(), found.places, draft.notes])
    [note] = [note for note in draft.notes if repr(parameter) in note]
    assert "left out" in note and "header" in note


def test_names_that_only_contain_a_credential_word_are_ordinary_values():
    found = draft_of(
        "curl -H 'Accept: application/json' -H 'X-Request-Id: r-1' -H 'X-Keyboard: k-1' "
        "'https://api.example.com/search?keyword=k&monkey=m&author=a&tokens=9&passage=p'"
    )
    config = found.draft.config
    assert config["fixed"] == {
        "query": {"keyword": "k", "monkey": "m", "author": "a", "tokens": "9", "passage": "p"},
        "headers": {"Accept": "application/json", "X-Request-Id": "r-1", "X-Keyboard": "k-1"},
    }
    assert "auth" not in config and found.secret is None and found.draft.notes == ()
    for name in [*config["fixed"]["query"], *config["fixed"]["headers"]]:
        assert not credential_like(name)  # and so a save keeps them


def test_every_name_a_save_refuses_in_clear_is_a_credential_here_too():
    # (the draft must save: an Idempotency-Key fixed in the config would be refused)
    found = draft_of("curl -u sk_1: -H 'Idempotency-Key: i-1' https://api.example.com/v1/x")
    assert found.draft.config["auth"] == {"type": "header", "header": "Authorization"}
    assert "fixed" not in found.draft.config
    assert any("Idempotency-Key also" in note for note in found.draft.notes)


def test_the_first_credential_is_the_auth_and_the_others_are_left_out_with_a_note():
    found = draft_of(
        "curl -H 'Authorization: Bearer first-1' -H 'X-API-Key: second-2' "
        "-H 'X-Shopify-Access-Token: third-3' 'https://a.example.com/x?access_token=fourth-4'"
    )
    config = found.draft.config
    assert config["auth"] == {"type": "bearer"} and found.secret == "first-1"
    assert "fixed" not in config
    shown = json.dumps([found.draft.definition_fields(), found.places, found.draft.notes])
    for other in ("second-2", "third-3", "fourth-4"):
        assert other not in shown
    assert sum("X-API-Key also" in n or "X-Shopify-Access-Token also" in n
               for n in found.draft.notes) == 2  # fmt: skip


def test_credentials_anywhere_in_the_body_are_left_out_flags_and_counts_stay():
    body = {
        "auth": {"user": "u", "pass": "pw-1"},
        "data": {"api_key": "nested-2", "city": "Oslo", "items": [{"token": "listed-3"}]},
        "max_tokens": 64,
        "use_auth": True,
        "keyword": "k",
    }
    found = draft_of(f"curl https://a.example.com/v1/send --json '{json.dumps(body)}'")
    assert found.draft.config["fixed"]["body"] == {
        "data": {"city": "Oslo", "items": [{}]}, "max_tokens": 64, "use_auth": True,
        "keyword": "k",
    }  # fmt: skip
    shown = json.dumps([found.draft.definition_fields(), found.places, found.draft.notes])
    for value in ("pw-1", "nested-2", "listed-3"):
        assert value not in shown
    assert any("'data.api_key'" in note for note in found.draft.notes)


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("curl file:///etc/passwd", "http:// or https://"),
        ("curl gopher://example.com/1", "http:// or https://"),
        ("curl example.com/x", "http:// or https://"),
        ("curl -K ~/.curlrc https://a.example.com", "config file"),
        ("curl --config x https://a.example.com", "config file"),
        ("curl https://a.example.com --next https://b.example.com", "several requests"),
        ("curl https://a.example.com https://b.example.com", "more than one URL"),
        ("curl -d @secrets.json https://a.example.com", "@file"),
        ("curl --data-binary @/etc/shadow https://a.example.com", "@file"),
        ("curl --data-urlencode name@/etc/passwd https://a.example.com", "@file"),
        ("curl -H @headers.txt https://a.example.com", "file"),
        ("curl -F file=@photo.jpg https://a.example.com", "multipart"),
        ("curl -T big.iso https://a.example.com", "uploading"),
        ("curl -x http://proxy:3128 https://a.example.com", "proxy"),
        ("curl --unix-socket /var/run/docker.sock http://localhost/containers", "Unix socket"),
        ("curl https://a.example.com; rm -rf ~", "Shell operators"),
        ("curl https://a.example.com && curl https://b.example.com", "Shell operators"),
        ("curl https://a.example.com | sh", "Shell operators"),
        ("curl https://a.example.com > out.txt", "Shell operators"),
        ("curl https://a.example.com -d $(cat /etc/passwd)", "Shell operators"),
        ("curl https://a.example.com -d `id`", "substitution"),
        ("wget https://a.example.com", "start with curl"),
        ("curl -X HEAD https://a.example.com", "not a method"),
        ("curl 'https://a.example.com", "quote"),
        ("curl https://user:pw@a.example.com", "credentials"),
        ("curl -X GET -d '{\"a\": 1}' https://a.example.com", "use -G"),
        ("curl -d '[1, 2]' https://a.example.com", "object"),
        ("curl -d '{oops' https://a.example.com", "not valid JSON"),
        ("curl 'https://a.example.com?tag=a&tag=b'", "repeats"),
        ("curl -u alice https://a.example.com", "user:password"),
        ("curl -zq https://a.example.com", "not an option"),
        ("curl", "no URL"),
        ("", "Paste a curl command"),
    ],
)
def test_hostile_or_unusable_commands_are_refused_with_our_message(command, says):
    with pytest.raises(ImportRefused) as refused:
        parse_curl(command)
    assert says.lower() in refused.value.message.lower()


def test_bounds_on_the_command_and_its_headers():
    with pytest.raises(ImportRefused, match="characters"):
        parse_curl("curl https://a.example.com/" + "a" * MAX_COMMAND_CHARS)
    headers = " ".join(f"-H 'X-H{i}: v'" for i in range(MAX_HEADERS + 1))
    with pytest.raises(ImportRefused, match="headers"):
        parse_curl(f"curl {headers} https://a.example.com")


@pytest.mark.parametrize(
    ("marks", "path", "says"),
    [
        ({"query.nope": "x"}, "marks.query.nope", "no such value"),
        ({"body.a.b": "x"}, "marks.body.a.b", "top-level"),
        ({"header.Authorization": "token"}, "marks.header.Authorization", "credential"),
        ({"query.api_key": "k"}, "marks.query.api_key", "credential"),
        ({"query.city": "1city"}, "marks.query.city", "name"),
        ({"query.city": {"name": "city", "type": "date"}}, "marks.query.city", "type"),
        ({"query.city": "x", "body.a": "x"}, "marks.body.a", "Two arguments"),
        ({"query.city": {"name": "city", "shell": "rm"}}, "marks.query.city", "Unknown"),
    ],
)
def test_bad_marks_are_refused_at_their_place(marks, path, says):
    command = ("curl -H 'Authorization: Bearer t' 'https://a.example.com/x?city=Paris' "
               "-d '{\"a\": {\"b\": 1}}'")  # fmt: skip
    with pytest.raises(ImportRefused) as refused:
        parse_curl(command, marks=marks)
    assert refused.value.path == path
    assert says.lower() in refused.value.message.lower()


def test_places_list_every_markable_value_but_never_the_credential():
    found = parse_curl(
        "curl -H 'Authorization: Bearer t0k' -H 'X-Region: eu' "
        "'https://a.example.com/v1/users/42?fields=name' --json '{\"note\": \"hi\"}'"
    )
    places = dict(found.places)
    assert places == {
        "path.v1": "v1", "path.users": "users", "path.42": "42",
        "query.fields": "name", "header.X-Region": "eu", "body.note": "hi",
    }  # fmt: skip
    assert "t0k" not in json.dumps(found.places)


def test_a_placeholder_pasted_in_the_path_becomes_a_string_argument():
    found = draft_of("curl https://api.example.com/users/{user_id}/posts")
    assert found.draft.config["arguments"] == [{"argument": "user_id", "to": "path"}]
    assert found.draft.input_schema["required"] == ["user_id"]


def test_a_credential_in_the_body_is_left_out_and_a_deep_body_is_refused():
    found = draft_of(
        'curl https://a.example.com/v1/send -d \'{"api_key": "sk-body-1", "to": "x"}\''
    )
    assert found.draft.config["fixed"] == {"body": {"to": "x"}}
    assert "sk-body-1" not in json.dumps(found.draft.definition_fields())
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(ImportRefused):
        parse_curl(f"curl https://a.example.com -d '{{\"a\": {deep}}}'")
    with pytest.raises(ImportRefused, match="nested"):
        parse_curl(f"curl https://a.example.com -d '{{\"a\": {'[' * 40}{']' * 40}}}'")

"""Every save of one configuration object compiles its tenant's whole configuration.

A form, a REST resource, the admin or a service saving one object a document holds (a
provider connection, MCP server, tool definition, agent, crew or knowledge base) runs the
model's full_clean, which asks this check (`base.config_checks`, registered in
`AgentsConfig.ready`): the tenant's document (`agents.config_document.tenant_entries`) with
the object as it is about to be saved goes through the configuration compiler, so a rule
of the whole graph — the tenant's confirmation policy, a dependency cycle, an agent naming
a tool that does not exist, a credential in a URL — holds whichever face saves. Only the
problems this save adds are refused (those already stored are reported by the import, and
by saving the objects they are in), each at the model field its document path maps to.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

import pydantic
from django.core.exceptions import NON_FIELD_ERRORS, ObjectDoesNotExist, ValidationError

from agents.config_document import (
    FIELDS,
    KEYS,
    SECTIONS,
    entry_name,
    known_names,
    object_entry,
    policy_entry,
    section_of_model,
    tenant_entries,
)
from agents.runtime.config.compiler import ConfigInvalid, ConfigProblem, KnownNames, compile_config
from agents.runtime.config.document import VERSION, ConfigDocument

NOUNS = {
    "connections": "connection",
    "model_aliases": "model alias",
    "tools": "tool",
    "agents": "agent",
    "crews": "crew",
    "workflows": "workflow",
    "skills": "skill",
    "mcp_servers": "MCP server",
    "knowledge_bases": "knowledge base",
    "prices": "price",
    "quotas": "quota",
    "triggers": "trigger",
}
_PATH = re.compile(r"^(?P<section>[a-z_]+)\[(?P<index>\d+)\](?:\.(?P<rest>.*))?$")
_SELF = object()  # the object being saved, whatever its name before and after

ProblemKey = tuple[str, Any, str, str]  # section, object name (or _SELF), path in it, reason


def check_saved_object(instance: Any, left_out: frozenset[str], failed: frozenset[str]) -> None:
    """ValidationError listing the problems saving `instance` adds to its tenant's compiled
    configuration, each under the model field it concerns (one its form leaves out, in
    `left_out`, and problems of other objects: non-field errors). Costs the export's five
    queries, one for the tenant's groups and a compile; a second compile (of the stored
    state) only when the first finds problems."""
    section = section_of_model(type(instance))
    if section is None or instance.tenant_id is None:
        return
    tenant = instance.tenant
    current = tenant_entries(tenant)
    known = known_names(tenant, current, prune=True)  # every object is in the document
    stored_name = None
    if instance.pk is not None:
        stored = current.objects[section].items()
        stored_name = next((name for name, obj in stored if obj.pk == instance.pk), None)
    after = {s: dict(current.entries[s]) for s in SECTIONS}
    after[section].pop(stored_name, None)
    try:
        entry = object_entry(section, instance)
    except (ObjectDoesNotExist, AttributeError, TypeError, ValueError):
        if failed:  # a value its own validation refused (a missing related object, say)
            return
        raise
    for field in FIELDS[section]:  # refused already: their defaults, so the graph is read
        if field.attr in failed and field.key != KEYS[section]:
            *parents, last = field.key.split(".")
            place = entry
            for parent in parents:
                place = place.get(parent, {})
            place.pop(last, None)
    name = entry_name(section, entry)
    after[section][name] = entry
    if stored_name is not None and stored_name != name:
        _follow_rename(after, section, stored_name, name)
    added = _problems(tenant, after, known, {(section, name): _SELF})
    if not added:
        return
    owns = {} if stored_name is None else {(section, stored_name): _SELF}
    before = _problems(tenant, current.entries, known, owns)
    new = [problem for problem in added if problem not in before]
    if new:
        errors = _errors(section, new, left_out, failed)
        if errors:
            raise ValidationError(errors)


def problems_saving_together(instances: Sequence[Any]) -> list[tuple[int | None, str]]:
    """What saving all of `instances` (one tenant's, each valid on its own) adds to its
    compiled configuration, each problem with the index of the object it is in (None:
    another object's, which they break) — `base.config_checks.problems_saving_together`.
    One compile of the end state; a second, of the stored state, only when it finds
    problems."""
    if not instances:
        return []
    tenant = instances[0].tenant
    current = tenant_entries(tenant)
    known = known_names(tenant, current, prune=True)
    after = {s: dict(current.entries[s]) for s in SECTIONS}
    owns_after: dict[tuple[str, str], Any] = {}
    owns_before: dict[tuple[str, str], Any] = {}
    for index, instance in enumerate(instances):
        section = section_of_model(type(instance))
        if section is None or instance.tenant_id != tenant.pk:
            raise ValueError("Objects saved together are one tenant's configuration objects.")
        stored_name = None
        if instance.pk is not None:
            stored = current.objects[section].items()
            stored_name = next((name for name, obj in stored if obj.pk == instance.pk), None)
        after[section].pop(stored_name, None)
        entry = object_entry(section, instance)
        name = entry_name(section, entry)
        after[section][name] = entry
        owns_after[(section, name)] = ("saved", index)
        if stored_name is not None:
            owns_before[(section, stored_name)] = ("saved", index)
            if stored_name != name:
                _follow_rename(after, section, stored_name, name)
    added = _problems(tenant, after, known, owns_after)
    if not added:
        return []
    before = _problems(tenant, current.entries, known, owns_before)
    problems: list[tuple[int | None, str]] = []
    for where, name, rest, reason in added:
        if (where, name, rest, reason) in before:
            continue
        if isinstance(name, tuple):
            problems.append((name[1], f"{rest}: {reason}" if rest else reason))
        elif name is None:
            problems.append((None, f"{rest}: {reason}" if rest else reason))
        else:
            at = f" ({rest})" if rest else ""
            problems.append((None, f"{NOUNS.get(where, where)} {name!r}{at}: {reason}"))
    return problems


def _follow_rename(
    entries: dict[str, dict[str, dict[str, Any]]], section: str, old: str, new: str
) -> None:
    """The references to a renamed object that are stored as relations (a crew's members,
    a trigger's or quota's agent, an agent's connection) name it by its new name once it is
    saved: the document of the end state says so (entries changed are copied, not changed
    in place, since the stored state's document shares them)."""
    for other, by_name in entries.items():
        fields = [f for f in FIELDS[other] if f.refers_to == section]
        for key, entry in list(by_name.items()) if fields else ():
            renamed = copy.deepcopy(entry)
            for field in fields:
                *parents, last = field.key.split(".")
                place = renamed
                for parent in parents:
                    place = place.get(parent, {})
                value = place.get(last)
                if value == old:
                    place[last] = new
                elif isinstance(value, list):
                    place[last] = [new if item == old else item for item in value]
            by_name[key] = renamed


def _problems(
    tenant: Any,
    entries: dict[str, dict[str, dict[str, Any]]],
    known: KnownNames,
    owns: dict[tuple[str, str], Any],
) -> list[ProblemKey]:
    """The compiler's problems with `entries` as a document, keyed by object name (the
    objects being saved, `owns`' (section, name), by their marker: _SELF, say). Other
    objects whose entry is malformed (rows written past validation) are left out, so they
    do not hide the graph."""
    lists: dict[str, list[dict[str, Any]]] = {}
    for name, entries_of in entries.items():
        lists[name] = [
            entry
            for key, entry in entries_of.items()
            if (name, key) in owns or _well_formed(name, entry)
        ]
    document = {"version": VERSION, "policy": policy_entry(tenant), **lists}
    try:
        compile_config(document, known=known)
    except ConfigInvalid as exc:
        return [_key(problem, lists, owns) for problem in exc.problems]
    return []


def _well_formed(section: str, entry: dict[str, Any]) -> bool:
    # The entry's model: the type of the document's list of this section.
    model = ConfigDocument.model_fields[section].annotation.__args__[0]  # type: ignore[union-attr]
    try:
        model.model_validate(entry)
    except pydantic.ValidationError:
        return False
    return True


def _key(
    problem: ConfigProblem,
    lists: dict[str, list[dict[str, Any]]],
    owns: dict[tuple[str, str], Any],
) -> ProblemKey:
    match = _PATH.match(problem.path)
    if match is None or match["section"] not in lists:
        return ("", None, problem.path, problem.reason)
    where = match["section"]
    name = entry_name(where, lists[where][int(match["index"])])
    name = owns.get((where, name), name)
    return (where, name, match["rest"] or "", problem.reason)


def _errors(
    section: str, problems: list[ProblemKey], left_out: frozenset[str], failed: frozenset[str]
) -> dict:
    errors: dict[str, list[str]] = {}
    for where, name, rest, reason in problems:
        if name is _SELF:
            attr, inside = _model_field(section, rest)
            if attr is not None and attr in failed:
                continue  # its own validation said why already
            if attr is not None and attr not in left_out:
                errors.setdefault(attr, []).append(f"{inside}: {reason}" if inside else reason)
            else:
                errors.setdefault(NON_FIELD_ERRORS, []).append(
                    f"{rest}: {reason}" if rest else reason
                )
        elif name is None:
            errors.setdefault(NON_FIELD_ERRORS, []).append(f"{rest}: {reason}" if rest else reason)
        else:
            at = f" ({rest})" if rest else ""
            errors.setdefault(NON_FIELD_ERRORS, []).append(
                f"{NOUNS.get(where, where)} {name!r}{at}: {reason}"
            )
    return errors


def _model_field(section: str, rest: str) -> tuple[str | None, str]:
    """The model field a document path inside an entry is stored in, and the rest of the
    path inside that field ("config.url" -> ("config", "url"))."""
    for field in FIELDS[section]:
        key = field.key
        if rest == key or rest.startswith((f"{key}.", f"{key}[")):
            return field.attr, rest[len(key) :].lstrip(".")
    for field in FIELDS[section]:  # a path above the field: "confirmation"
        if field.key.startswith(f"{rest}."):
            return field.attr, ""
    return None, ""

"""Skills (docs/skills.md): the tenant's skills with their versions; uploading a package
(a zip) as a new version; approving a version for agents to use. Admins only (the
policy's `change_config`); another tenant's skill answers 404."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agentplatform.web.config.common import admin_required, error_messages, render_page
from agents import skills


class SkillUploadForm(forms.Form):
    file = forms.FileField(
        label="Skill package (.zip)",
        help_text="A zip of the skill's folder: SKILL.md (front matter with name and "
        "description, then instructions) and its files. Each upload is a new version, "
        "usable by agents once approved.",
        widget=forms.ClearableFileInput(attrs={"accept": ".zip,application/zip"}),
    )


@admin_required
def skill_list(request: HttpRequest) -> HttpResponse:
    form = SkillUploadForm(request.POST or None, request.FILES or None)
    status = 200
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            data = upload.read(skills.Limits().archive_bytes + 1)
            package = skills.skill_package_read(data)
            version, created = skills.skill_import(
                tenant=request.tenant, by=request.principal, package=package
            )
        except ValidationError as refused:
            for message in error_messages(refused):
                form.add_error("file", message)
        else:
            done = "Installed" if created else "Already installed:"
            messages.success(request, f"{done} {package.name} version {version.number}.")
            return redirect("config:skills", tenant_slug=request.tenant.slug)
    if form.errors:
        status = 400
    pins = skills.skill_pins_by_skill(request.tenant)
    rows = [
        {
            "skill": skill,
            "versions": list(skills.skill_versions(skill)),
            "pins": pins.get(skill.pk, []),
        }
        for skill in skills.skills_of(request.tenant)
    ]
    return render_page(
        request, "web/config/skill_list.html", {"form": form, "rows": rows}, status=status
    )


@admin_required
@require_POST
def skill_approve(request: HttpRequest, name: str, number: int) -> HttpResponse:
    version = skills.skill_version_of(request.tenant, name, number)
    skills.skill_version_approve(tenant=request.tenant, by=request.principal, version=version)
    messages.success(request, f"Approved {name} version {number}.")
    return redirect("config:skills", tenant_slug=request.tenant.slug)

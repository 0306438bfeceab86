"""Test-only tenant-owned models to exercise the scoped admin and encrypted field."""

from django.conf import settings
from django.db import models

from base.encryption import EncryptedTextField
from tenancy.models import Tenant


class Project(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    name = models.CharField(max_length=100)
    token = EncryptedTextField(null=True, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    def __str__(self) -> str:
        return self.name


class Ticket(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE)
    watchers = models.ManyToManyField(Project, blank=True, related_name="watched_tickets")
    title = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.title

from __future__ import annotations

from django.urls import path

from agentplatform.web.chat import attachments, sources, views

app_name = "chat"
urlpatterns = [
    path("", views.index, name="index"),
    path("new/", views.new, name="new"),
    path("<int:conversation_id>/", views.conversation, name="conversation"),
    path("<int:conversation_id>/send/", views.send, name="send"),
    path("<int:conversation_id>/steer/", views.steer, name="steer"),
    path("<int:conversation_id>/queued/<int:queued_id>/remove/", views.unqueue, name="unqueue"),
    path("<int:conversation_id>/regenerate/", views.regenerate, name="regenerate"),
    path("<int:conversation_id>/rename/", views.rename, name="rename"),
    path("<int:conversation_id>/messages/<int:message_id>/edit/", views.edit, name="edit_message"),
    path("<int:conversation_id>/switch/", views.switch, name="switch"),
    path("<int:conversation_id>/fork/", views.fork, name="fork"),
    path("<int:conversation_id>/delete/", views.delete, name="delete"),
    path("<int:conversation_id>/runs/<int:run_id>/stream/", views.stream, name="stream"),
    path("<int:conversation_id>/runs/<int:run_id>/cancel/", views.cancel, name="cancel"),
    path("<int:conversation_id>/runs/<int:run_id>/resume/", views.resume, name="resume"),
    path("<int:conversation_id>/approvals/<int:approval_id>/", views.decide, name="decide"),
    path("sources/<int:document_id>/", sources.source, name="source"),
    path("<int:conversation_id>/attach/", attachments.attach, name="attach"),
    path(
        "<int:conversation_id>/attachments/<int:attachment_id>/",
        attachments.attachment,
        name="attachment",
    ),
    path(
        "<int:conversation_id>/attachments/<int:attachment_id>/chip/",
        attachments.chip,
        name="attachment_chip",
    ),
    path(
        "<int:conversation_id>/attachments/<int:attachment_id>/remove/",
        attachments.detach,
        name="detach",
    ),
]

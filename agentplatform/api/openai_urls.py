"""The `/v1` routes: OpenAI's (and Anthropic's) API shapes over a tenant's agents and crews."""

from django.urls import path, re_path

from agentplatform.api import (
    anthropic_messages,
    openai_compat,
    openai_embeddings,
    openai_responses,
)

urlpatterns = [
    path("models", openai_compat.models_list, name="openai_models"),
    path("models/<str:model_id>", openai_compat.model_detail, name="openai_model"),
    path("chat/completions", openai_compat.chat_completions, name="openai_chat_completions"),
    path("responses", openai_responses.responses, name="openai_responses"),
    path(
        "responses/<str:response_id>",
        openai_responses.response_detail,
        name="openai_response",
    ),
    path("embeddings", openai_embeddings.embeddings, name="openai_embeddings"),
    path("messages", anthropic_messages.messages, name="anthropic_messages"),
    path("messages/count_tokens", anthropic_messages.count_tokens, name="anthropic_count_tokens"),
    re_path(r"^(?P<rest>.*)$", openai_compat.unknown_endpoint),
]

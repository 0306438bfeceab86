"""The `/v1` routes: OpenAI's (and Anthropic's) API shapes over a tenant's agents and crews,
and the gateway's `<connection>/<model>` models."""

from django.urls import path, re_path

from agentplatform.v1 import chat_completions, embeddings, endpoint, messages, model_list, responses

urlpatterns = [
    path("models", model_list.models_list, name="openai_models"),
    path("models/<str:model_id>", model_list.model_detail, name="openai_model"),
    path("chat/completions", chat_completions.chat_completions, name="openai_chat_completions"),
    path("responses", responses.responses, name="openai_responses"),
    path("responses/<str:response_id>", responses.response_detail, name="openai_response"),
    path("embeddings", embeddings.embeddings, name="openai_embeddings"),
    path("messages", messages.messages, name="anthropic_messages"),
    path("messages/count_tokens", messages.count_tokens, name="anthropic_count_tokens"),
    re_path(r"^(?P<rest>.*)$", endpoint.unknown_endpoint),
]

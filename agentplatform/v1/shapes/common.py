"""Shapes every OpenAI-style `/v1` face shares: the error, and the models list."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from agentplatform.v1.shapes.base import Shape

ERROR_CODES = (
    "`invalid_api_key`, `missing_api_key` (401); `insufficient_scope`, `permission_denied` "
    "(403); `model_not_found`, `not_found`, `unknown_url` (404); `method_not_allowed` (405); "
    "`rate_limit_exceeded` (429); `run_failed`, `run_cancelled` (500); null otherwise "
    "(the 400s, 413, and the 404 of an unknown `previous_response_id`)."
)


class OpenAIErrorBody(Shape):
    message: Annotated[str, Field(description="What went wrong, for a human.")]
    type: Annotated[
        Literal["invalid_request_error", "requests", "server_error"],
        Field(
            description="`requests` for a 429, `server_error` for a 500, "
            "`invalid_request_error` for everything else."
        ),
    ]
    param: Annotated[
        str | None,
        Field(
            description="The request field at fault, e.g. `model`, `messages`, "
            "`messages[2].content`, `tools[0].function.name`, `temperature` (for "
            "`/v1/responses`: `input[1]`, `text.format`, `max_output_tokens`, "
            "`previous_response_id`, ...); else null."
        ),
    ]
    code: Annotated[str | None, Field(description=ERROR_CODES)]


class OpenAIError(Shape):
    """OpenAI's error shape, used by every `/v1` error response."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "error": {
                    "message": "The model `gpt-4o` does not exist or you do not have access to it.",
                    "type": "invalid_request_error",
                    "param": "model",
                    "code": "model_not_found",
                }
            }
        }
    )

    error: OpenAIErrorBody


class OpenAIModel(Shape):
    """An active agent or crew of the key's tenant, named by its slug."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "id": "assistant",
                "object": "model",
                "created": 1751328000,
                "owned_by": "acme",
            }
        }
    )

    id: Annotated[str, Field(description="The agent's or crew's slug.")]
    object: Literal["model"]
    created: Annotated[int, Field(description="When the agent or crew was created (Unix seconds).")]
    owned_by: Annotated[str, Field(description="The tenant's slug.")]


class OpenAIModelList(Shape):
    """The tenant's active agents (by slug), then its active crews whose slug no agent takes;
    not paginated."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "object": "list",
                "data": [
                    {
                        "id": "assistant",
                        "object": "model",
                        "created": 1751328000,
                        "owned_by": "acme",
                    },
                    {"id": "desk", "object": "model", "created": 1751414400, "owned_by": "acme"},
                ],
            }
        }
    )

    object: Literal["list"]
    data: list[OpenAIModel]

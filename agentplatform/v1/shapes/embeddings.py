"""OpenAI's embeddings on the wire (`POST /v1/embeddings`): the request, checked here (what
the texts are, how the vectors come back), and the answer."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from agentplatform.v1.shapes.base import Refusal, Shape, Text, by_json_type

MAX_INPUTS = 2048  # as OpenAI
MAX_INPUT_CHARS = 32_000  # each; about 8k tokens
MAX_MODEL_CHARS = 300
MAX_DIMENSIONS = 8192
INPUT = (
    f"`input` must be a non-empty string or a list of at most {MAX_INPUTS} non-empty strings "
    f"of at most {MAX_INPUT_CHARS} characters (token arrays are not supported)."
)
EmbeddedText = Annotated[Text, Field(min_length=1, max_length=MAX_INPUT_CHARS)]


class EmbeddingsRequest(Shape):
    """Embeds `input` with `model`. `user` and other fields are ignored."""

    model_config = ConfigDict(
        json_schema_extra={"example": {"model": "static", "input": ["a cat", "a dog"]}}
    )

    model: Annotated[
        Text,
        Field(
            min_length=1,
            max_length=MAX_MODEL_CHARS,
            description="`<connection>/<model>` (the connection's name slugified, a model it "
            "allows, e.g. `openai/text-embedding-3-small`) for a connection whose service has an "
            "embeddings endpoint; `local` (all-MiniLM-L6-v2, 384 dimensions, where its optional "
            "install is) or `static` (256 dimensions), the platform's own models.",
        ),
        Refusal("`model` is required: `<connection>/<model>` or `local`."),
    ]
    input: Annotated[
        by_json_type(
            string=EmbeddedText,
            array=Annotated[list[EmbeddedText], Field(min_length=1, max_length=MAX_INPUTS)],
        ),
        Field(
            description=f"A text, or a list of at most {MAX_INPUTS} texts; each non-empty, at "
            f"most {MAX_INPUT_CHARS} characters, no NUL characters."
        ),
        Refusal(INPUT),
    ]
    encoding_format: Annotated[
        Literal["float", "base64"],
        Field(description="Each vector as numbers, or as base64 of little-endian float32s."),
        Refusal("`encoding_format` must be `float` or `base64`."),
    ] = "float"
    dimensions: Annotated[
        int | None,
        Field(
            ge=1,
            le=MAX_DIMENSIONS,
            description="Passed to the connection's model; the platform's own models have "
            "theirs (another is a 400).",
        ),
        Refusal(f"`dimensions` must be an integer from 1 to {MAX_DIMENSIONS}."),
    ] = None

    @property
    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else self.input


class Embedding(Shape):
    object: Literal["embedding"]
    index: Annotated[int, Field(ge=0, description="The text's position in `input`.")]
    embedding: Annotated[
        list[float] | str,
        Field(description="The vector: numbers, or (`encoding_format` `base64`) a string."),
    ]


class EmbeddingsUsage(Shape):
    prompt_tokens: Annotated[
        int,
        Field(
            description="What the provider counted; for the platform's own models, the "
            "word pieces the model read."
        ),
    ]
    total_tokens: int


class EmbeddingList(Shape):
    """The vectors, in the order of `input`."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "object": "list",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.12, -0.05, 0.33]}],
                "model": "static",
                "usage": {"prompt_tokens": 2, "total_tokens": 2},
            }
        }
    )

    object: Literal["list"]
    data: list[Embedding]
    model: Annotated[str, Field(description="The requested `model`.")]
    usage: EmbeddingsUsage

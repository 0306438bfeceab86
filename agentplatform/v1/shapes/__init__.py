"""The `/v1` wire shapes: pydantic models that check a request's shape and are the OpenAPI
document's schemas (`base`: what a shape is; `common`, `chat`, `responses`: the shapes)."""

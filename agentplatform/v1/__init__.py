"""The `/v1` faces: other vendors' APIs over a tenant's agents, crews and models.

OpenAI's Chat Completions (`chat_completions`), Responses (`responses`), embeddings
(`embeddings`) and models list (`model_list`), and Anthropic's Messages (`messages`), each
over the tenant's agents and crews; a `<connection>/<model>` model goes through the gateway
(`gateway`: a package the faces import by its facade; its own door in front of Django, its
translations between the two APIs). What every face shares (errors, the
key check, throttling) is `endpoint`; the wire shapes, typed, and the OpenAPI they give are
`shapes` and `openapi`. REST (`/api/v1/`) is `agentplatform.api`: neither imports the other.
"""

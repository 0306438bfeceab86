"""OpenAI-compatible services: base URL and the quirks that differ from OpenAI's API."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    label: str
    base_url: str
    needs_api_key: bool = True
    stream_usage: bool = True  # honours stream_options.include_usage
    max_tokens_field: str = "max_tokens"  # or "max_completion_tokens"
    tool_choice_required: bool = True  # accepts tool_choice="required"
    embeddings: bool = True
    default_model: str = ""


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset("openai", "OpenAI", "https://api.openai.com/v1",
               max_tokens_field="max_completion_tokens", default_model="gpt-4.1-mini"),
        Preset("xai", "xAI (Grok)", "https://api.x.ai/v1", embeddings=False,
               default_model="grok-3-mini"),
        Preset("openrouter", "OpenRouter", "https://openrouter.ai/api/v1", embeddings=False),
        Preset("gemini", "Google Gemini (OpenAI endpoint)",
               "https://generativelanguage.googleapis.com/v1beta/openai",
               default_model="gemini-2.5-flash"),
        Preset("groq", "Groq", "https://api.groq.com/openai/v1", embeddings=False),
        Preset("mistral", "Mistral", "https://api.mistral.ai/v1", stream_usage=False,
               tool_choice_required=False, default_model="mistral-small-latest"),
        Preset("deepseek", "DeepSeek", "https://api.deepseek.com/v1", embeddings=False,
               default_model="deepseek-chat"),
        Preset("together", "Together AI", "https://api.together.xyz/v1"),
        Preset("ollama", "Ollama (local)", "http://localhost:11434/v1", needs_api_key=False,
               stream_usage=False),
        Preset("vllm", "vLLM", "http://localhost:8000/v1", needs_api_key=False),
        Preset("lmstudio", "LM Studio", "http://localhost:1234/v1", needs_api_key=False),
        Preset("custom", "Other OpenAI-compatible server", "", needs_api_key=False),
    ]
}  # fmt: skip

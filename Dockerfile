# One image for the web server, the workers and beat; docker-compose.yml shows how they run.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# No access line per request (its write on the event loop costs each call 0.3-0.5 ms; every
# run and gateway call is recorded anyway): UVICORN_ACCESS_LOG=true turns it on.
ENV UVICORN_ACCESS_LOG=false
WORKDIR /app

COPY pyproject.toml README.md ./
# With the otel extra: a deployment turns traces on by setting OTEL_EXPORTER_OTLP_ENDPOINT,
# without another image (docs/observability.md).
RUN pip install --no-cache-dir '.[otel]'

COPY . .
RUN useradd --create-home --uid 1000 app && chown -R app /app
USER app

EXPOSE 8000
# Lifespan on: /mcp and the start-up checks run there. A bounded graceful shutdown: an event
# stream following a parked run never ends by itself, so SIGTERM would wait for ever.
CMD ["python", "-m", "uvicorn", "agentplatform.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--lifespan", "on", "--timeout-graceful-shutdown", "5"]

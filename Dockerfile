# The worker image: the runtime dependencies only (requirements-runtime.lock: the package and
# its `otel` extra; no test tools, no Temporal CLI), run by an unprivileged user.
#   docker build -t durable-agent-tasks:0.1.0 .
#   docker run --env-file .env durable-agent-tasks:0.1.0             (a worker)
#   docker run --env-file .env durable-agent-tasks:0.1.0 agent-tasks setup
FROM python:3.13-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/agent-tasks
WORKDIR /src
COPY requirements-runtime.lock ./
RUN /opt/agent-tasks/bin/pip install --require-hashes --no-deps -r requirements-runtime.lock
COPY pyproject.toml README.md ./
COPY agent_tasks agent_tasks
RUN /opt/agent-tasks/bin/pip install --no-deps .

FROM python:3.13-slim
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin agent-tasks
COPY --from=build /opt/agent-tasks /opt/agent-tasks
ENV PATH=/opt/agent-tasks/bin:$PATH PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
CMD ["agent-tasks", "worker"]

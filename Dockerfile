FROM python:3.11-slim
WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
RUN pip install --no-cache-dir -r requirements.lock
COPY workflows workflows
COPY activities activities
COPY taskgraph taskgraph
COPY starter starter
COPY devstack devstack
COPY trajectories trajectories
COPY worker.py config.py ./
RUN pip install --no-cache-dir --no-deps .
CMD ["python", "worker.py"]

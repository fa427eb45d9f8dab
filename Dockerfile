FROM python:3.11-slim
WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
RUN pip install --no-cache-dir -r requirements.lock
COPY workflows workflows
COPY activities activities
COPY starter starter
COPY worker.py .
RUN pip install --no-cache-dir --no-deps .
CMD ["python", "worker.py"]

"""The tests' OpenAI-compatible model server: ``bench.model_server``, shared with the bench
(``python -m bench peers`` talks to it from five runtimes; the bench may not import tests)."""

from bench.model_server import Exchange, ModelServer, Reply, chunk, completion, error

__all__ = ["Exchange", "ModelServer", "Reply", "chunk", "completion", "error"]

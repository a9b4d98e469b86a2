"""``SearchTool``: retrieval for Search-R1-style training, over a local BM25 index or a retrieval server.

Tool config (``config:`` of the entry in the tool config file):

* ``retrieval_service_url``: a Search-R1 retrieval server (``POST {"queries", "topk", "return_scores"}``), or
* ``corpus_path``: a JSONL/parquet corpus (``id`` and ``contents``, or ``title``/``text``) indexed locally with BM25
  (``bm25_k1``, ``bm25_b`` tune it); exactly one of the two is given;
* ``topk`` (3): passages per query; ``timeout`` (30 s) per HTTP request; ``max_retries`` (3) and ``retry_delay``
  (1 s, growing linearly) for 5xx answers;
* ``num_workers`` (120): threads running searches, so a slow search never blocks the rollout's event loop;
  ``rate_limit`` (120): searches in flight at once from this tool instance.

A failed search (server down, timeout, bad arguments) is answered with an error text, not an exception, so the
model sees what went wrong and the trajectory goes on.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.multi_turn.tools.base_tool import BaseTool
from verl.multi_turn.tools.schemas import OpenAIFunctionToolSchema
from verl.multi_turn.tools.utils.search_backends import (
    BM25Index,
    HttpRetrievalBackend,
    Passage,
    RetrievalError,
    SearchBackend,
)

__all__ = ["SearchTool", "format_passages", "make_search_backend"]

DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Searches a knowledge corpus and returns the most relevant passages for each query.",
        "parameters": {
            "type": "object",
            "properties": {
                "query_list": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "One or more search queries, each a short string.",
                }
            },
            "required": ["query_list"],
        },
    },
}


def _positive(config: dict, key: str, default: float, cast: type = int) -> Any:
    value = config.get(key, default)
    try:
        value = cast(value)
    except (TypeError, ValueError):
        value = None
    if value is None or value <= 0:
        raise ValueError(f"SearchTool config {key}={config.get(key)!r}: expected a positive {cast.__name__}")
    return value


def make_search_backend(config: dict) -> SearchBackend:
    """The backend named by the tool config: HTTP for ``retrieval_service_url``, BM25 for ``corpus_path``."""
    url, corpus_path = config.get("retrieval_service_url"), config.get("corpus_path")
    if bool(url) == bool(corpus_path):
        raise ValueError(
            "SearchTool config: set exactly one of retrieval_service_url (a retrieval server) or corpus_path "
            f"(a local corpus for BM25); got retrieval_service_url={url!r}, corpus_path={corpus_path!r}"
        )
    if url:
        return HttpRetrievalBackend(
            url,
            timeout=_positive(config, "timeout", 30.0, float),
            max_retries=int(config.get("max_retries", 3)),
            retry_delay=float(config.get("retry_delay", 1.0)),
        )
    return BM25Index.from_corpus_file(
        corpus_path, k1=float(config.get("bm25_k1", 0.9)), b=float(config.get("bm25_b", 0.4))
    )


def format_passages(passages: list[Passage]) -> str:
    """Search-R1's layout: ``Doc i(Title: <first line>) <rest>``, one passage per line."""
    lines = []
    for i, passage in enumerate(passages, start=1):
        title, _, text = passage.contents.partition("\n")
        if not text:  # a passage without a title line
            title, text = "", title
        lines.append(f"Doc {i}(Title: {title}) {text}")
    return "\n".join(lines) if lines else "No passages found."


def _query_list_error(parameters: Any) -> str | None:
    queries = parameters.get("query_list") if isinstance(parameters, dict) else None
    if not isinstance(queries, list) or not queries:
        return f"Error: 'query_list' must be a non-empty list of query strings, got {queries!r}."
    if not all(isinstance(q, str) and q.strip() for q in queries):
        return f"Error: every entry of 'query_list' must be a non-empty string, got {queries!r}."
    return None


class SearchTool(BaseTool):
    """The ``search`` tool: takes ``query_list`` and answers with the top-k passages of each query."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema)
        self.topk = _positive(self.config, "topk", 3)
        self.num_workers = _positive(self.config, "num_workers", 120)
        self.rate_limit = _positive(self.config, "rate_limit", 120)
        self.backend = make_search_backend(self.config)
        self._in_flight = threading.BoundedSemaphore(self.rate_limit)
        # made on first use: a tool that never searches starts no threads
        self._executor: ThreadPoolExecutor | None = None

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """``search(query_list: list[str])``."""
        return OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)

    def _search(self, queries: list[str]) -> list[list[Passage]]:
        with self._in_flight:
            return self.backend.search(queries, self.topk)

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[str, float, dict]:
        """Search every query; returns ``(formatted passages or an error text, 0.0, metrics)``."""
        error = _query_list_error(parameters)
        if error is not None:
            return error, 0.0, {"num_queries": 0, "latency_s": 0.0, "error": 1}
        queries = parameters["query_list"]
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.num_workers, thread_name_prefix="search_tool")
        start = time.perf_counter()
        try:
            results = await asyncio.get_running_loop().run_in_executor(self._executor, self._search, queries)
        except RetrievalError as err:
            latency = time.perf_counter() - start
            return f"Error: search failed: {err}", 0.0, {"num_queries": len(queries), "latency_s": latency, "error": 1}
        latency = time.perf_counter() - start
        if len(queries) == 1:
            text = format_passages(results[0])
        else:
            # several queries: label each block so the model can tell which passages answer which query
            text = "\n---\n".join(f"Query: {q}\n{format_passages(r)}" for q, r in zip(queries, results))
        metrics = {
            "num_queries": len(queries),
            "num_passages": sum(len(r) for r in results),
            "latency_s": latency,
            "error": 0,
        }
        return text, 0.0, metrics

"""``SandboxFusionTool``: the model runs code in a SandboxFusion service (any of its languages) over HTTP.

Tool config (``config:`` of the entry in the tool config file):

* ``sandbox_fusion_url`` (required): the service's ``run_code`` endpoint, e.g. ``http://localhost:8080/run_code``;
* ``num_workers`` (10): threads that wait on the service, so a slow run never blocks the rollout's event loop;
* ``rate_limit`` (10): requests in flight at once; with ``enable_global_rate_limit`` (true) the bound is shared by
  every SandboxFusionTool of this process that uses the same URL (verl shares it through a Ray actor; here the tool
  lives inside one rollout worker, so a process-wide semaphore does the same job);
* ``default_timeout`` (30 s), ``default_language`` ("python"), ``memory_limit_mb`` (1024): per run; a call may pass
  its own ``timeout`` and ``language``.

Each call runs through ``sandbox_fusion.utils._process_single_case`` without expected output and answers with the
program's stdout, or ``"no stdout here"``; when the run failed, its stderr (or the API error) follows, so the model
sees why and the trajectory goes on.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.multi_turn.tools.code_interpreter_tool import CodeToolBase, code_tool_answer, config_number
from verl.multi_turn.tools.schemas import OpenAIFunctionToolSchema
from verl.utils.reward_score.sandbox_fusion import utils as sandbox_utils

__all__ = ["SandboxFusionTool"]

_GLOBAL_LIMITS: dict[str, threading.BoundedSemaphore] = {}
_GLOBAL_LIMITS_LOCK = threading.Lock()


def _global_limit(url: str, rate_limit: int) -> threading.BoundedSemaphore:
    """One semaphore per service URL for the whole process (the first tool to ask sets its size)."""
    with _GLOBAL_LIMITS_LOCK:
        return _GLOBAL_LIMITS.setdefault(url, threading.BoundedSemaphore(rate_limit))


class SandboxFusionTool(CodeToolBase):
    """The ``code_interpreter`` tool backed by a SandboxFusion service."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema)
        name = type(self).__name__
        self.sandbox_fusion_url = self.config.get("sandbox_fusion_url")
        if not isinstance(self.sandbox_fusion_url, str) or not self.sandbox_fusion_url.strip():
            raise ValueError(
                f"{name} config sandbox_fusion_url={self.sandbox_fusion_url!r}: expected the URL of a SandboxFusion "
                "service's run_code endpoint, e.g. http://localhost:8080/run_code"
            )
        self.num_workers = config_number(name, self.config, "num_workers", 10)
        self.rate_limit = config_number(name, self.config, "rate_limit", 10)
        self.default_timeout = config_number(name, self.config, "default_timeout", 30, float)
        self.memory_limit_mb = config_number(name, self.config, "memory_limit_mb", 1024)
        self.default_language = self.config.get("default_language", "python")
        if self.default_language not in sandbox_utils.SUPPORTED_LANGUAGES:
            raise ValueError(
                f"{name} config default_language={self.default_language!r}: expected one of "
                f"{sandbox_utils.SUPPORTED_LANGUAGES}"
            )
        if self.config.get("enable_global_rate_limit", True):
            self._limit = _global_limit(self.sandbox_fusion_url, self.rate_limit)
        else:
            self._limit = threading.BoundedSemaphore(self.rate_limit)
        self._executor: ThreadPoolExecutor | None = None  # made on first use: an idle tool starts no threads

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[str, float, dict]:
        """Run ``parameters["code"]`` (optional ``timeout``, ``language``); returns ``(text, 0.0, metrics)``."""
        code, timeout, error = self._parse_call(parameters, self.default_timeout)
        language = parameters.get("language", self.default_language) if isinstance(parameters, dict) else None
        if error is None and language not in sandbox_utils.SUPPORTED_LANGUAGES:
            error = f"Error: 'language' must be one of {sandbox_utils.SUPPORTED_LANGUAGES}, got {language!r}."
        if error:
            return error, 0.0, {"duration_s": 0.0, "error": 1}
        self._count_call(instance_id)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.num_workers, thread_name_prefix="sandbox_fusion_tool")
        args = (0, "", None, self.sandbox_fusion_url, code, timeout, self.memory_limit_mb, language, self._limit)
        _, metadata = await asyncio.get_running_loop().run_in_executor(
            self._executor, sandbox_utils._process_single_case, *args
        )
        failed = metadata["status"] != "success"
        details = metadata["stderr"] or metadata["compile_stderr"] or metadata["api_request_error"]
        if failed and not details:
            details = f"run status: {metadata['status']}"
        text = code_tool_answer(metadata["stdout"], details, failed)
        return text, 0.0, {"duration_s": float(metadata["duration"] or 0.0), "error": int(failed)}

"""A generative reward model served over HTTP: replicas behind a router on 127.0.0.1 (verl's reward loop).

The router speaks the OpenAI chat-completions protocol (``POST /v1/chat/completions``, ``GET /v1/models``,
``GET /health``), so a reward function written for verl, which posts to ``http://{reward_router_address}/v1/chat/
completions``, runs unchanged. Each request goes to the replica with the fewest requests in flight. A replica is a
:class:`VLLMChatReplica` (``reward_model.rollout.name=vllm``: a vLLM engine in the replica's process; the requests
that arrive while it generates are batched into its next call) or an :class:`HFChatReplica` (``hf``: transformers
``generate``, one request at a time, the fallback where vLLM cannot run): a Ray actor on its own CPU when Ray runs,
else an object in this process (the in-process worker group), served from the router's threads.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logger = logging.getLogger(__name__)

__all__ = ["HFChatReplica", "RewardRouter", "ServedRewardModel", "VLLMChatReplica"]


def _sampling(request: dict, max_response_tokens: int) -> tuple[list, int, float, float, int]:
    """``(messages, max_tokens, temperature, top_p, n)`` of a chat-completions request dict."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("a chat-completions request needs a non-empty 'messages' list")
    max_tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 256)
    max_tokens = max(1, min(max_tokens, max_response_tokens))
    temperature = float(request.get("temperature", 1.0) or 0.0)
    top_p = float(request.get("top_p", 1.0) or 1.0)
    n = max(1, int(request.get("n", 1) or 1))
    return messages, max_tokens, temperature, top_p, n


def _chat_prompt_ids(tokenizer, messages: list[dict], max_prompt_tokens: int) -> list[int]:
    """The model's prompt for ``messages``: its chat template, or the turns one after another without one; longer
    prompts keep their last ``max_prompt_tokens`` tokens."""
    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        text = "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages) + "\nassistant:"
        ids = tokenizer(text)["input_ids"]
    return list(ids)[-max_prompt_tokens:]


def _completion(tokenizer, served_name: str, prompt_ids: list[int], rows: list[list[int]]) -> dict:
    """An OpenAI ``chat.completion`` object for the generated token ``rows`` (each cut at the first EOS)."""
    choices, completion_tokens = [], 0
    for i, row in enumerate(rows):
        finish = "length"
        if tokenizer.eos_token_id in row:
            row, finish = row[: row.index(tokenizer.eos_token_id)], "stop"
        completion_tokens += len(row)
        text = tokenizer.decode(row, skip_special_tokens=True)
        choices.append({"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": finish})
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": served_name,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        },
    }


class HFChatReplica:
    """One copy of a causal LM answering chat-completion requests with ``generate`` (one request at a time).

    ``max_prompt_tokens``: longer prompts keep their last tokens; ``max_response_tokens`` caps ``max_tokens``."""

    def __init__(
        self,
        model_path: str,
        dtype: str = "bfloat16",
        max_prompt_tokens: int = 2048,
        max_response_tokens: int = 2048,
        trust_remote_code: bool = False,
        served_name: str | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM

        from verl.utils.tokenizer import hf_tokenizer

        self.tokenizer = hf_tokenizer(model_path, trust_remote_code=trust_remote_code)
        torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch_dtype, trust_remote_code=trust_remote_code
        ).eval()
        self.max_prompt_tokens, self.max_response_tokens = max_prompt_tokens, max_response_tokens
        self.served_name = served_name or model_path
        self._lock = threading.Lock()  # generate is not re-entrant on one model

    def chat(self, request: dict) -> dict:
        """An OpenAI ``chat.completion`` object (a dict) for a request dict (``messages``, ``max_tokens``,
        ``temperature``, ``top_p``, ``n``; other fields are ignored)."""
        import torch

        messages, max_tokens, temperature, top_p, n = _sampling(request, self.max_response_tokens)
        prompt_ids = _chat_prompt_ids(self.tokenizer, messages, self.max_prompt_tokens)
        input_ids = torch.tensor([prompt_ids] * n, dtype=torch.long)
        sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {}
        with self._lock, torch.no_grad():
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=max_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
                do_sample=bool(sampling),
                **{k: v for k, v in sampling.items() if k != "do_sample"},
            )
        rows = output[:, len(prompt_ids) :].tolist()
        return _completion(self.tokenizer, self.served_name, prompt_ids, rows)


class VLLMChatReplica:
    """One vLLM engine (in this process: in-process engine, ``uni`` executor) answering chat-completion requests.

    Requests that arrive while the engine generates wait and go into its next ``generate`` call together, so a
    replica serves the reward function's concurrent calls as one batch. On CPU the KV cache is sized for
    ``max_num_seqs`` full sequences within ``gpu_memory_utilization`` of the host's available memory."""

    def __init__(
        self,
        model_path: str,
        dtype: str = "bfloat16",
        max_prompt_tokens: int = 2048,
        max_response_tokens: int = 2048,
        trust_remote_code: bool = False,
        served_name: str | None = None,
        gpu_memory_utilization: float = 0.5,
        max_num_seqs: int = 16,
    ):
        import os
        import queue

        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine lives in this process (or Ray actor)
        from transformers import AutoConfig
        from vllm import LLM

        from verl.utils.device import is_accelerator_available
        from verl.utils.tokenizer import hf_tokenizer
        from verl.workers.rollout.vllm_cpu import cpu_kv_cache_bytes, cpu_rollout_dtype

        self.tokenizer = hf_tokenizer(model_path, trust_remote_code=trust_remote_code)
        self.max_prompt_tokens, self.max_response_tokens = max_prompt_tokens, max_response_tokens
        self.served_name = served_name or model_path
        max_model_len = max_prompt_tokens + max_response_tokens
        engine = {"gpu_memory_utilization": gpu_memory_utilization}
        if not is_accelerator_available():
            dtype = cpu_rollout_dtype(dtype)
            hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
            engine = {
                "kv_cache_memory_bytes": cpu_kv_cache_bytes(
                    hf_config, dtype, max_model_len, max_num_seqs, gpu_memory_utilization
                )
            }
        self.engine = LLM(
            model=model_path,
            dtype=dtype,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            enforce_eager=True,
            distributed_executor_backend="uni",
            trust_remote_code=trust_remote_code,
            disable_log_stats=True,
            **engine,
        )
        self._queue: queue.Queue = queue.Queue()
        self._batches = 0  # generate calls, for tests and logs
        threading.Thread(target=self._serve, name="vllm-judge", daemon=True).start()

    def chat(self, request: dict) -> dict:
        """As `HFChatReplica.chat`; waits for the engine's next batch."""
        import concurrent.futures

        from vllm import SamplingParams

        messages, max_tokens, temperature, top_p, n = _sampling(request, self.max_response_tokens)
        prompt_ids = _chat_prompt_ids(self.tokenizer, messages, self.max_prompt_tokens)
        params = SamplingParams(
            n=n,
            temperature=temperature,
            top_p=top_p if temperature > 0 else 1.0,
            max_tokens=max_tokens,
            stop_token_ids=[self.tokenizer.eos_token_id],
            detokenize=False,
        )
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((prompt_ids, params, future))
        rows = future.result()
        return _completion(self.tokenizer, self.served_name, prompt_ids, rows)

    def _serve(self) -> None:
        import queue

        while True:
            waiting = [self._queue.get()]
            while True:
                try:
                    waiting.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                outputs = self.engine.generate(
                    [{"prompt_token_ids": ids} for ids, _, _ in waiting], [p for _, p, _ in waiting], use_tqdm=False
                )
                self._batches += 1
                for (_, _, future), output in zip(waiting, outputs, strict=True):
                    future.set_result([list(c.token_ids) for c in output.outputs])  # with the stop token
            except Exception as e:  # noqa: BLE001 - every waiting request fails, the replica keeps serving
                for _, _, future in waiting:
                    if not future.done():
                        future.set_exception(e)

    def batches(self) -> int:
        """``generate`` calls so far."""
        return self._batches


class RewardRouter:
    """An HTTP server on 127.0.0.1 that hands each chat-completion request to the least busy backend.

    ``backends``: callables ``request dict -> response dict`` (a replica's ``chat``, or a Ray actor's behind
    ``ray.get``). ``address`` is ``"127.0.0.1:<port>"``, the form verl passes as ``reward_router_address``."""

    def __init__(self, backends: list[Callable[[dict], dict]], served_name: str = "reward_model", port: int = 0):
        if not backends:
            raise ValueError("a reward router needs at least one backend")
        self.backends = list(backends)
        self.served_name = served_name
        self.in_flight = [0] * len(self.backends)
        self.requests = [0] * len(self.backends)
        self._lock = threading.Lock()
        router = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # one line per request would flood the trainer's console
                pass

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/") in ("/health", ""):
                    self._reply(200, {"status": "ok", "replicas": len(router.backends)})
                elif self.path.rstrip("/") == "/v1/models":
                    self._reply(200, {"object": "list", "data": [{"id": router.served_name, "object": "model"}]})
                else:
                    self._reply(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._reply(404, {"error": {"message": f"no route {self.path}; use /v1/chat/completions"}})
                    return
                try:
                    request = json.loads(raw or b"{}")
                except json.JSONDecodeError as e:
                    self._reply(400, {"error": {"message": f"body is not JSON: {e}"}})
                    return
                try:
                    self._reply(200, router.dispatch(request))
                except ValueError as e:
                    self._reply(400, {"error": {"message": str(e)}})
                except Exception as e:  # noqa: BLE001 - the caller's reward call fails, the server stays up
                    logger.warning("reward model request failed: %s: %s", type(e).__name__, e)
                    self._reply(500, {"error": {"message": f"{type(e).__name__}: {e}"}})

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="reward-router", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def dispatch(self, request: dict) -> dict:
        """Run ``request`` on the backend with the fewest requests in flight (ties: the fewest served so far)."""
        with self._lock:
            i = min(range(len(self.backends)), key=lambda k: (self.in_flight[k], self.requests[k]))
            self.in_flight[i] += 1
            self.requests[i] += 1
        try:
            return self.backends[i](request)
        finally:
            with self._lock:
                self.in_flight[i] -= 1

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _AddressOnly:
    """What a :class:`ServedRewardModel` pickles to (for a Ray worker): its started router's address and the
    reward model's tokenizer, loaded there on first use."""

    def __init__(self, address: str, model_path: str, trust_remote_code: bool = False):
        self.address, self.model_path, self.trust_remote_code = address, model_path, trust_remote_code
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from verl.utils.tokenizer import hf_tokenizer

            self._tokenizer = hf_tokenizer(self.model_path, trust_remote_code=self.trust_remote_code)
        return self._tokenizer


class ServedRewardModel:
    """``replicas`` copies of the generative reward model at ``model_path`` behind a :class:`RewardRouter`, each a
    :class:`VLLMChatReplica` (``engine="vllm"``) or an :class:`HFChatReplica` (``engine="hf"``).

    Started on first use of :attr:`address` (or :meth:`start`): with Ray running, each replica is a Ray actor holding
    ``num_cpus`` CPUs (its own resources; 0 shares the trainer's); without, the replicas live in this process."""

    def __init__(
        self,
        model_path: str,
        replicas: int = 1,
        num_cpus: float = 1.0,
        dtype: str = "bfloat16",
        max_prompt_tokens: int = 2048,
        max_response_tokens: int = 2048,
        trust_remote_code: bool = False,
        engine: str = "hf",
        gpu_memory_utilization: float = 0.5,
    ):
        if replicas < 1:
            raise ValueError(f"a served reward model needs replicas >= 1, got {replicas}")
        if engine not in _REPLICAS:
            raise ValueError(f"a served reward model's engine is one of {sorted(_REPLICAS)}, got {engine!r}")
        self.model_path, self.replicas, self.num_cpus, self.engine = model_path, replicas, num_cpus, engine
        self.replica_kwargs = {
            "model_path": model_path,
            "dtype": dtype,
            "max_prompt_tokens": max_prompt_tokens,
            "max_response_tokens": max_response_tokens,
            "trust_remote_code": trust_remote_code,
        }
        if engine == "vllm":
            self.replica_kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        self.router: RewardRouter | None = None
        self.actors: list = []
        self._tokenizer = None
        self._lock = threading.Lock()

    def __reduce__(self):
        return (_AddressOnly, (self.address, self.model_path, self.replica_kwargs["trust_remote_code"]))

    @property
    def tokenizer(self):
        """The reward model's tokenizer (verl's ``reward_model_tokenizer``), loaded in this process."""
        if self._tokenizer is None:
            from verl.utils.tokenizer import hf_tokenizer

            self._tokenizer = hf_tokenizer(self.model_path, trust_remote_code=self.replica_kwargs["trust_remote_code"])
        return self._tokenizer

    @property
    def address(self) -> str:
        """``"127.0.0.1:<port>"`` of the router (starts the replicas and the router on first use)."""
        self.start()
        return self.router.address

    def start(self) -> None:
        with self._lock:
            if self.router is not None:
                return
            began = time.monotonic()
            backends = self._start_ray_replicas() if _ray_running() else self._start_local_replicas()
            self.router = RewardRouter(backends, served_name=self.model_path)
            logger.warning(
                "served reward model %s: %d replica(s) %s behind http://%s/v1/chat/completions (%.1f s to start)",
                self.model_path,
                self.replicas,
                "in Ray actors" if self.actors else "in this process",
                self.router.address,
                time.monotonic() - began,
            )

    def _start_local_replicas(self) -> list[Callable[[dict], dict]]:
        return [_REPLICAS[self.engine](**self.replica_kwargs).chat for _ in range(self.replicas)]

    def _start_ray_replicas(self) -> list[Callable[[dict], dict]]:
        import ray

        # a vLLM replica batches the requests that wait together: let them in concurrently
        concurrency = 64 if self.engine == "vllm" else 1
        actor_cls = ray.remote(_REPLICAS[self.engine]).options(num_cpus=self.num_cpus, max_concurrency=concurrency)
        self.actors = [actor_cls.remote(**self.replica_kwargs) for _ in range(self.replicas)]

        def backend(actor):
            return lambda request: ray.get(actor.chat.remote(request))

        ray.get([actor.__ray_ready__.remote() for actor in self.actors])  # load errors surface here, not per call
        return [backend(actor) for actor in self.actors]

    def stop(self) -> None:
        """Stop the router and end the replicas' actors."""
        with self._lock:
            if self.router is not None:
                self.router.close()
                self.router = None
            if self.actors:
                import ray

                for actor in self.actors:
                    ray.kill(actor)
                self.actors = []


_REPLICAS = {"hf": HFChatReplica, "vllm": VLLMChatReplica}


def _ray_running() -> bool:
    try:
        import ray
    except ImportError:
        return False
    return ray.is_initialized()

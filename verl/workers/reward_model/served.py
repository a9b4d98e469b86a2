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

__all__ = [
    "HFChatReplica",
    "HFScoreReplica",
    "RewardRouter",
    "ServedRewardModel",
    "ServedScoreManager",
    "VLLMChatReplica",
]


def _load_hf(auto_cls, model_path: str, dtype, trust_remote_code: bool, **kwargs) -> tuple:
    """``(tokenizer, model)``: the folder's tokenizer and ``auto_cls.from_pretrained`` in eval mode, in ``dtype``."""
    import torch

    from verl.utils.tokenizer import hf_tokenizer

    tokenizer = hf_tokenizer(model_path, trust_remote_code=trust_remote_code)
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    model = auto_cls.from_pretrained(model_path, dtype=torch_dtype, trust_remote_code=trust_remote_code, **kwargs)
    return tokenizer, model.eval()


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
        from transformers import AutoModelForCausalLM

        self.tokenizer, self.model = _load_hf(AutoModelForCausalLM, model_path, dtype, trust_remote_code)
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
        from verl.workers.rollout.vllm_rollout.distributed_state import vllm_will_own_default_group

        self._owns_default_group = vllm_will_own_default_group()
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
        self._server = threading.Thread(target=self._serve, name="vllm-judge", daemon=True)
        self._server.start()

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
            if any(item is None for item in waiting):  # stop(): fail what came with it and end
                for item in waiting:
                    if item is not None:
                        item[2].set_exception(RuntimeError("the vLLM judge replica was stopped"))
                return
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

    def stop(self) -> None:
        """End the serving thread, drop the engine and release vLLM's process-wide groups, so a later engine in
        this process starts clean (see ``verl.workers.rollout.vllm_rollout.distributed_state``)."""
        if self.engine is None:
            return
        import gc

        from verl.workers.rollout.vllm_rollout.distributed_state import release_vllm_distributed_state

        self._queue.put(None)
        self._server.join(timeout=60)
        self.engine = None
        gc.collect()
        release_vllm_distributed_state(self._owns_default_group)


class HFScoreReplica:
    """One copy of a discriminative reward model (token classification with one label, as the reward-model worker
    loads it) answering ``/pooling`` requests: the score at the last token of each templated conversation.

    ``max_length``: longer inputs keep their first tokens (the worker's default ``truncation=right``)."""

    def __init__(
        self,
        model_path: str,
        dtype: str = "bfloat16",
        max_length: int = 4096,
        trust_remote_code: bool = False,
        served_name: str | None = None,
    ):
        from transformers import AutoModelForTokenClassification

        auto_cls = AutoModelForTokenClassification
        self.tokenizer, self.model = _load_hf(auto_cls, model_path, dtype, trust_remote_code, num_labels=1)
        self.max_length = max_length
        self.served_name = served_name or model_path
        self._lock = threading.Lock()

    def _texts(self, request: dict) -> list[str]:
        if "messages" in request:  # one conversation, templated with this model's chat template
            messages = request["messages"]
            if not isinstance(messages, list) or not messages:
                raise ValueError("a /pooling request's 'messages' must be a non-empty list")
            return [self.tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)]
        texts = request.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError("a /pooling request needs 'messages' (a chat) or 'input' (a string or list of strings)")
        return texts

    def pool(self, request: dict) -> dict:
        """vLLM's ``/pooling`` response for a request dict (``messages``: one chat; or ``input``: templated text or
        texts): ``data[i].data == [score]``."""
        import torch

        texts = self._texts(request)
        data, prompt_tokens = [], 0
        with self._lock, torch.no_grad():
            for i, text in enumerate(texts):
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][: self.max_length]
                logits = self.model(input_ids=torch.tensor([ids], dtype=torch.long)).logits
                data.append({"index": i, "object": "pooling", "data": [float(logits[0, -1, 0])]})
                prompt_tokens += len(ids)
        return {
            "id": f"pool-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": self.served_name,
            "data": data,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }


CHAT_ROUTE, POOLING_ROUTE = "/v1/chat/completions", "/pooling"


class _Server(ThreadingHTTPServer):
    # an async reward function opens hundreds of connections at once; the default backlog (5) resets some of them
    request_queue_size = 1024


class _Route:
    """The backends of one POST route and their load."""

    def __init__(self, backends: list[Callable[[dict], dict]]):
        self.backends = list(backends)
        self.in_flight = [0] * len(self.backends)
        self.requests = [0] * len(self.backends)


class RewardRouter:
    """An HTTP server on 127.0.0.1 that hands each request to the least busy backend of its route.

    ``backends``: callables ``request dict -> response dict`` answering ``POST /v1/chat/completions`` (a generative
    replica's ``chat``, or a Ray actor's behind ``ray.get``); ``scorers``: those answering ``POST /pooling`` (a
    discriminative replica's ``pool``). ``address`` is ``"127.0.0.1:<port>"``, the form verl passes as
    ``reward_router_address``."""

    def __init__(
        self,
        backends: list[Callable[[dict], dict]],
        served_name: str = "reward_model",
        port: int = 0,
        scorers: list[Callable[[dict], dict]] | None = None,
    ):
        if not backends and not scorers:
            raise ValueError("a reward router needs at least one backend")
        self.routes = {CHAT_ROUTE: _Route(backends), POOLING_ROUTE: _Route(scorers or [])}
        self.served_name = served_name
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
                path = self.path.rstrip("/")
                served = [p for p, r in router.routes.items() if r.backends]
                if path not in served:
                    self._reply(404, {"error": {"message": f"no route {self.path}; use {' or '.join(served)}"}})
                    return
                try:
                    request = json.loads(raw or b"{}")
                except json.JSONDecodeError as e:
                    self._reply(400, {"error": {"message": f"body is not JSON: {e}"}})
                    return
                try:
                    self._reply(200, router.dispatch(request, path))
                except ValueError as e:
                    self._reply(400, {"error": {"message": str(e)}})
                except Exception as e:  # noqa: BLE001 - the caller's reward call fails, the server stays up
                    logger.warning("reward model request failed: %s: %s", type(e).__name__, e)
                    self._reply(500, {"error": {"message": f"{type(e).__name__}: {e}"}})

        self._server = _Server(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="reward-router", daemon=True)
        self._thread.start()

    # the chat route's backends and load (the generative replicas)
    @property
    def backends(self) -> list:
        return self.routes[CHAT_ROUTE].backends

    @property
    def in_flight(self) -> list[int]:
        return self.routes[CHAT_ROUTE].in_flight

    @property
    def requests(self) -> list[int]:
        return self.routes[CHAT_ROUTE].requests

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def dispatch(self, request: dict, path: str = CHAT_ROUTE) -> dict:
        """Run ``request`` on the backend of ``path`` with the fewest requests in flight (ties: the fewest served)."""
        route = self.routes[path]
        with self._lock:
            i = min(range(len(route.backends)), key=lambda k: (route.in_flight[k], route.requests[k]))
            route.in_flight[i] += 1
            route.requests[i] += 1
        try:
            return route.backends[i](request)
        finally:
            with self._lock:
                route.in_flight[i] -= 1

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
    """``replicas`` copies of the generative reward model at ``model_path`` and/or of the discriminative one at
    ``score_model_path`` behind one :class:`RewardRouter`: generative replicas are :class:`VLLMChatReplica`
    (``engine="vllm"``) or :class:`HFChatReplica` (``engine="hf"``) on ``/v1/chat/completions``, discriminative ones
    :class:`HFScoreReplica` on ``/pooling``.

    Started on first use of :attr:`address` (or :meth:`start`): with Ray running, each replica is a Ray actor holding
    ``num_cpus`` CPUs (its own resources; 0 shares the trainer's); without, the replicas live in this process."""

    def __init__(
        self,
        model_path: str | None,
        replicas: int = 1,
        num_cpus: float = 1.0,
        dtype: str = "bfloat16",
        max_prompt_tokens: int = 2048,
        max_response_tokens: int = 2048,
        trust_remote_code: bool = False,
        engine: str = "hf",
        gpu_memory_utilization: float = 0.5,
        score_model_path: str | None = None,
    ):
        if replicas < 1:
            raise ValueError(f"a served reward model needs replicas >= 1, got {replicas}")
        if engine not in _REPLICAS:
            raise ValueError(f"a served reward model's engine is one of {sorted(_REPLICAS)}, got {engine!r}")
        if model_path is None and score_model_path is None:
            raise ValueError("a served reward model needs a generative (model_path) or a scoring model path")
        self.model_path, self.score_model_path = model_path, score_model_path
        self.replicas, self.num_cpus, self.engine = replicas, num_cpus, engine
        self.trust_remote_code = trust_remote_code
        self.replica_kwargs = {
            "model_path": model_path,
            "dtype": dtype,
            "max_prompt_tokens": max_prompt_tokens,
            "max_response_tokens": max_response_tokens,
            "trust_remote_code": trust_remote_code,
        }
        if engine == "vllm":
            self.replica_kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        self.score_kwargs = {
            "model_path": score_model_path,
            "dtype": dtype,
            "max_length": max_prompt_tokens + max_response_tokens,
            "trust_remote_code": trust_remote_code,
        }
        self.router: RewardRouter | None = None
        self.actors: list = []
        self.local_replicas: list = []  # the replicas in this process (no Ray running)
        self._tokenizer = None
        self._lock = threading.Lock()

    @property
    def _tokenizer_path(self) -> str:
        return self.model_path or self.score_model_path

    def __reduce__(self):
        return (_AddressOnly, (self.address, self._tokenizer_path, self.trust_remote_code))

    @property
    def tokenizer(self):
        """The reward model's tokenizer (verl's ``reward_model_tokenizer``: the generative model's if there is one),
        loaded in this process."""
        if self._tokenizer is None:
            from verl.utils.tokenizer import hf_tokenizer

            self._tokenizer = hf_tokenizer(self._tokenizer_path, trust_remote_code=self.trust_remote_code)
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
            ray = _ray_running()
            chat, score = [], []
            if self.model_path is not None:
                replica = _REPLICAS[self.engine]
                # a vLLM replica batches the requests that wait together: let them in concurrently
                chat = self._start_replicas(
                    replica, self.replica_kwargs, "chat", 64 if self.engine == "vllm" else 1, ray
                )
            if self.score_model_path is not None:
                score = self._start_replicas(HFScoreReplica, self.score_kwargs, "pool", 1, ray)
            self.router = RewardRouter(chat, served_name=self._tokenizer_path, scorers=score)
            logger.warning(
                "served reward model: %s%s, %d replica(s) each, %s, behind http://%s (%.1f s to start)",
                f"{self.model_path} on {CHAT_ROUTE}" if self.model_path else "",
                f"{'; ' if self.model_path else ''}{self.score_model_path} on {POOLING_ROUTE}"
                if self.score_model_path
                else "",
                self.replicas,
                "in Ray actors" if self.actors else "in this process",
                self.router.address,
                time.monotonic() - began,
            )

    def _start_replicas(self, cls, kwargs: dict, method: str, concurrency: int, ray_running: bool) -> list:
        if not ray_running:
            replicas = [cls(**kwargs) for _ in range(self.replicas)]
            self.local_replicas += replicas
            return [getattr(replica, method) for replica in replicas]
        import ray

        actor_cls = ray.remote(cls).options(num_cpus=self.num_cpus, max_concurrency=concurrency)
        actors = [actor_cls.remote(**kwargs) for _ in range(self.replicas)]
        ray.get([actor.__ray_ready__.remote() for actor in actors])  # load errors surface here, not per call
        self.actors += actors

        def backend(actor):
            call = getattr(actor, method)
            return lambda request: ray.get(call.remote(request))

        return [backend(actor) for actor in actors]

    def stop(self) -> None:
        """Stop the router, the replicas in this process and the replicas' actors."""
        with self._lock:
            if self.router is not None:
                self.router.close()
                self.router = None
            for replica in self.local_replicas:
                if hasattr(replica, "stop"):
                    replica.stop()
            self.local_replicas = []
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


class ServedScoreManager:
    """A reward manager reading the served discriminative reward model (``POST /pooling`` of ``served``'s router):
    each sample's chat (``raw_prompt`` plus the decoded response) is scored on its own, ``max_concurrent`` at a time,
    and the score placed at its last valid response token. A call that fails scores 0 with a warning and is
    reported in ``reward_call_failed``. ``tokenizer``: the policy's, to decode the responses."""

    def __init__(self, tokenizer, served, num_examine: int = 0, max_concurrent: int = 16, timeout: float = 300.0):
        self.tokenizer, self.served, self.num_examine = tokenizer, served, num_examine
        self.max_concurrent, self.timeout = max_concurrent, timeout

    def _chats(self, data) -> list[list[dict]]:
        if "raw_prompt" not in data.non_tensor_batch:
            raise KeyError(
                "the served discriminative reward model scores the chat (prompt messages and response), which needs "
                "non_tensor_batch['raw_prompt']: set data.return_raw_chat=True"
            )
        responses = data.batch["responses"]
        valid = data.batch["attention_mask"][:, -responses.shape[-1] :].sum(-1).tolist()
        chats = []
        for i, length in enumerate(valid):
            text = self.tokenizer.decode(responses[i][:length].tolist())
            if self.tokenizer.eos_token:
                text = text.replace(self.tokenizer.eos_token, "")
            chats.append(list(data.non_tensor_batch["raw_prompt"][i]) + [{"role": "assistant", "content": text}])
        return chats

    def _score(self, chat: list[dict]) -> float:
        import urllib.request

        body = json.dumps({"messages": chat}).encode()
        request = urllib.request.Request(f"http://{self.served.address}{POOLING_ROUTE}", data=body)
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return float(json.loads(response.read())["data"][0]["data"][0])

    def __call__(self, data, return_dict: bool = False):
        """``reward_tensor`` ``(bs, response_length)`` or ``{"reward_tensor", "reward_extra_info"}``."""
        import concurrent.futures

        import torch

        chats = self._chats(data)
        scores, failed = [0.0] * len(chats), [False] * len(chats)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.max_concurrent)) as pool:
            futures = [pool.submit(self._score, chat) for chat in chats]
            for i, future in enumerate(futures):
                try:
                    scores[i] = future.result()
                except Exception as e:  # noqa: BLE001 - one sample's failure costs that sample, never the run
                    logger.warning(
                        "reward model score failed on sample %d, scoring it 0: %s: %s", i, type(e).__name__, e
                    )
                    failed[i] = True
        responses = data.batch["responses"]
        valid = data.batch["attention_mask"][:, -responses.shape[-1] :].sum(-1)
        reward_tensor = torch.zeros_like(responses, dtype=torch.float32)
        reward_tensor[torch.arange(len(chats)), (valid - 1).clamp(min=0)] = torch.tensor(scores, dtype=torch.float32)
        if not return_dict:
            return reward_tensor
        extra = {"reward_call_failed": failed} if any(failed) else {}
        return {"reward_tensor": reward_tensor, "reward_extra_info": extra}

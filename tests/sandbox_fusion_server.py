"""A small stand-in for a SandboxFusion service, for tests: it runs posted Python through the local sandbox.

``with sandbox_fusion_server() as server:`` serves ``POST {server.url}`` on 127.0.0.1 in a thread and answers in
SandboxFusion's shape (``status``, ``compile_result``, ``run_result``). ``server.fail_next_with_504`` answers that
many requests with 504 first; ``server.requests``, ``server.payloads`` and ``server.max_in_flight`` record what came.
"""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from verl.utils.sandbox import run_python

# local sandbox status -> SandboxFusion run_result.status
_RUN_STATUS = {"timeout": "TimeLimitExceeded", "sandbox_error": "Error"}


def _answer(payload: dict) -> dict:
    if payload.get("language") != "python":
        return {"status": "SandboxError", "message": f"language {payload.get('language')!r} is not served here"}
    memory = payload.get("memory_limit_MB")
    result = run_python(
        payload["code"],
        stdin=payload.get("stdin") or "",
        timeout_s=float(payload.get("run_timeout") or 10),
        memory_mb=memory if isinstance(memory, int) and memory > 0 else 1024,
    )
    run_result = {
        "status": _RUN_STATUS.get(result.status, "Finished"),
        "stdout": result.stdout,
        "stderr": result.stderr,
        "return_code": result.exit_code,
        "execution_time": result.duration,
    }
    return {
        "status": "Success" if result.status == "ok" else "Failed",
        "message": "",
        "compile_result": None,  # Python is not compiled
        "run_result": run_result,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/run_code"
        self.lock = threading.Lock()
        self.fail_next_with_504 = 0
        self.requests = 0
        self.payloads: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def do_POST(self):
        server: _Server = self.server
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server.lock:
            server.requests += 1
            server.payloads.append(payload)
            fail = server.fail_next_with_504 > 0
            server.fail_next_with_504 -= fail
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
        try:
            status, body = (504, {"error": "gateway timeout"}) if fail else (200, _answer(payload))
        finally:
            with server.lock:
                server.in_flight -= 1
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def sandbox_fusion_server():
    """Serve in a background thread for the duration of the ``with`` block."""
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def unused_local_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/run_code"

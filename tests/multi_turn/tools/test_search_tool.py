"""SearchTool: BM25 scores against hand-computed values, the local and HTTP backends, and errors as tool text."""

import asyncio
import json
import math
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest

from verl.multi_turn.tools.base_tool import initialize_tools_from_config
from verl.multi_turn.tools.search_tool import SearchTool, format_passages
from verl.multi_turn.tools.utils.search_backends import BM25Index, HttpRetrievalBackend, Passage, load_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXAMPLE_CONFIG = os.path.join(ROOT, "examples", "multiturn", "config", "tool_config", "search_tool_config.yaml")

CORPUS = [
    {"id": "p1", "contents": '"Paris"\nParis is the capital and largest city of France.'},
    {"id": "p2", "title": "Berlin", "text": "Berlin is the capital of Germany."},
    {"id": "p3", "contents": '"Mount Everest"\nMount Everest is the highest mountain above sea level.'},
    {"id": "p4", "contents": '"Seine"\nThe Seine is a river that flows through Paris in France.'},
]
PARIS = 'Doc 1(Title: "Paris") Paris is the capital and largest city of France.'
BERLIN = 'Doc 2(Title: "Berlin") Berlin is the capital of Germany.'


def _run(coro):
    return asyncio.run(coro)


@pytest.fixture()
def corpus_file(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in CORPUS))
    return str(path)


# ---- BM25 ----------------------------------------------------------------------------------------------------


def test_bm25_scores_match_the_formula_by_hand():
    # N=3, avgdl=3; df: apple 1, banana 2, cherry 2; k1=1.2, b=0.75
    index = BM25Index(["apple banana Apple", "banana, cherry", "cherry date elderberry fig"], k1=1.2, b=0.75)
    idf_apple, idf_banana = math.log(1 + 2.5 / 1.5), math.log(1 + 1.5 / 2.5)
    # d0: dl=3 -> K = 1.2 * (0.25 + 0.75 * 3/3) = 1.2; apple tf=2 -> 2*2.2/3.2, banana tf=1 -> 2.2/2.2
    d0 = idf_apple * 4.4 / 3.2 + idf_banana * 1.0
    # d1: dl=2 -> K = 1.2 * (0.25 + 0.75 * 2/3) = 0.9; banana tf=1 -> 2.2/1.9
    d1 = idf_banana * 2.2 / 1.9
    scores = index.scores("Apple banana")
    assert set(scores) == {0, 1}  # d2 shares no term and gets no score
    assert scores[0] == pytest.approx(d0, rel=1e-12) and scores[0] == pytest.approx(1.818644, abs=1e-6)
    assert scores[1] == pytest.approx(d1, rel=1e-12) and scores[1] == pytest.approx(0.544215, abs=1e-6)
    # a repeated query term counts once per occurrence
    assert index.scores("banana banana")[1] == pytest.approx(2 * d1)
    ranked = index.search(["apple banana"], topk=5)[0]
    assert [(p.id, p.contents) for p in ranked] == [("0", "apple banana Apple"), ("1", "banana, cherry")]
    assert [p.score for p in ranked] == pytest.approx([d0, d1])


def test_bm25_length_normalisation_topk_and_ties():
    index = BM25Index(["x cherry", "cherry a b c", "other"], ids=["a", "b", "c"], k1=1.2, b=0.75)
    assert [p.id for p in index.search(["cherry"], topk=5)[0]] == ["a", "b"]  # the shorter document wins
    assert [p.id for p in index.search(["cherry"], topk=1)[0]] == ["a"]
    flat = BM25Index(["cherry a b c", "x cherry"], k1=1.2, b=0.0)  # b=0: length ignored, a tie
    first, second = flat.search(["cherry"], topk=2)[0]
    assert first.score == second.score and (first.id, second.id) == ("0", "1")  # ties go to corpus order
    assert flat.search(["unknown words"], topk=3) == [[]]
    with pytest.raises(ValueError, match="k1 >= 0 and 0 <= b <= 1"):
        BM25Index(["a"], b=1.5)
    with pytest.raises(ValueError, match="corpus is empty"):
        BM25Index([])


def test_corpus_formats_and_errors(tmp_path, corpus_file):
    expected = [("p1", CORPUS[0]["contents"]), ("p2", '"Berlin"\nBerlin is the capital of Germany.')]
    assert load_corpus(corpus_file)[:2] == expected
    parquet = tmp_path / "corpus.parquet"
    pd.DataFrame([{"id": r["id"], "contents": c} for r, (_, c) in zip(CORPUS, load_corpus(corpus_file))]).to_parquet(
        parquet
    )
    assert load_corpus(str(parquet)) == load_corpus(corpus_file)
    with pytest.raises(FileNotFoundError, match="corpus_path.*nope.jsonl"):
        load_corpus(str(tmp_path / "nope.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "contents": "fine"}\n{"id": 2, "body": "no text field"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl: row 1: expected a 'contents' string or 'title'/'text'"):
        load_corpus(str(bad))
    bad.write_text("{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:1: not a JSON object"):
        load_corpus(str(bad))


# ---- the tool with the local backend ---------------------------------------------------------------------------


def _tool_config(tmp_path, **config):
    path = tmp_path / "tools.yaml"
    entry = {"class_name": "verl.tools.search_tool.SearchTool", "config": {"type": "native", **config}}
    path.write_text(json.dumps({"tools": [entry]}))
    return str(path)


def test_local_tool_through_the_config_file(tmp_path, corpus_file):
    (tool,) = initialize_tools_from_config(_tool_config(tmp_path, corpus_path=corpus_file, topk=2))
    assert isinstance(tool, SearchTool) and tool.name == "search" and tool.topk == 2
    prop = tool.tool_schema.function.parameters.properties["query_list"]
    assert prop.type == "array" and tool.tool_schema.function.parameters.required == ["query_list"]
    instance = _run(tool.create())
    text, reward, metrics = _run(tool.execute(instance, {"query_list": ["capital of France?"]}))
    assert text == f"{PARIS}\n{BERLIN}"  # Berlin (capital, of) beats the Seine (France)
    assert reward == 0.0
    assert metrics["num_queries"] == 1 and metrics["num_passages"] == 2 and metrics["error"] == 0
    assert metrics["latency_s"] >= 0.0
    text, _, metrics = _run(tool.execute(instance, {"query_list": ["capital of France", "highest mountain", "zzz"]}))
    everest = 'Doc 1(Title: "Mount Everest") Mount Everest is the highest mountain above sea level.'
    assert text == (
        f"Query: capital of France\n{PARIS}\n{BERLIN}\n---\nQuery: highest mountain\n{everest}\n---\n"
        "Query: zzz\nNo passages found."
    )
    assert metrics["num_queries"] == 3 and metrics["num_passages"] == 3
    assert _run(tool.calc_reward(instance)) == 0.0
    _run(tool.release(instance))


@pytest.mark.parametrize(
    "parameters, match",
    [
        ({}, "'query_list' must be a non-empty list of query strings, got None"),
        ({"query_list": "Paris"}, "non-empty list of query strings, got 'Paris'"),
        ({"query_list": []}, "non-empty list"),
        ({"query_list": ["Paris", 3]}, "every entry of 'query_list' must be a non-empty string"),
        ({"query_list": ["  "]}, "every entry of 'query_list' must be a non-empty string"),
        ("not a dict", "non-empty list of query strings"),
    ],
)
def test_malformed_arguments_become_the_response(tmp_path, corpus_file, parameters, match):
    tool = SearchTool({"corpus_path": corpus_file})
    text, reward, metrics = _run(tool.execute("id", parameters))
    assert text.startswith("Error: ") and match in text
    assert reward == 0.0 and metrics["error"] == 1


def test_config_errors_name_the_key(tmp_path, corpus_file):
    with pytest.raises(ValueError, match="exactly one of retrieval_service_url .* or corpus_path"):
        SearchTool({})
    with pytest.raises(ValueError, match="exactly one of"):
        SearchTool({"corpus_path": corpus_file, "retrieval_service_url": "http://127.0.0.1:1/retrieve"})
    with pytest.raises(ValueError, match="topk=0: expected a positive int"):
        SearchTool({"corpus_path": corpus_file, "topk": 0})
    with pytest.raises(ValueError, match="timeout='soon': expected a positive float"):
        SearchTool({"retrieval_service_url": "http://127.0.0.1:1/retrieve", "timeout": "soon"})
    with pytest.raises(ValueError, match="max_retries >= 0"):
        SearchTool({"retrieval_service_url": "http://127.0.0.1:1/retrieve", "max_retries": -1})
    with pytest.raises(FileNotFoundError, match="corpus_path"):
        SearchTool({"corpus_path": str(tmp_path / "missing.jsonl")})


def test_the_example_tool_config_loads():
    (tool,) = initialize_tools_from_config(EXAMPLE_CONFIG)
    assert isinstance(tool, SearchTool) and tool.name == "search"
    assert isinstance(tool.backend, HttpRetrievalBackend) and tool.backend.url == "http://127.0.0.1:8000/retrieve"
    assert (tool.topk, tool.num_workers, tool.rate_limit, tool.backend.timeout) == (3, 120, 120, 30.0)
    assert tool.tool_schema.function.parameters.properties["query_list"].type == "array"


def test_passage_formatting():
    passages = [Passage('"T"\nline one\nline two', 1.0), Passage("no title line", 0.5)]
    assert format_passages(passages) == 'Doc 1(Title: "T") line one\nline two\nDoc 2(Title: ) no title line'
    assert format_passages([]) == "No passages found."


# ---- the tool against a Search-R1-style retrieval server on 127.0.0.1 -----------------------------------------


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # the timeout test hangs up on a sleeping handler
        pass


class _Retriever:
    """A retrieval server in a thread, answering from a BM25 index; ``fail`` 5xx answers come first."""

    def __init__(self, index):
        self.index, self.fail, self.bodies = index, 0, []
        self.in_flight = self.max_in_flight = 0
        self.delay = 0.0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    failing = server.fail > 0
                    server.fail -= failing
                time.sleep(server.delay)
                with server.lock:
                    server.in_flight -= 1
                if self.path == "/missing":
                    return self._send(404, {"error": "no route"})
                if failing:
                    return self._send(500, {"error": "busy"})
                if self.path == "/short":  # one list too few
                    return self._send(200, {"result": []})
                result = [
                    [{"document": {"id": p.id, "contents": p.contents}, "score": p.score} for p in hits]
                    for hits in server.index.search(body["queries"], body["topk"])
                ]
                self._send(200, {"result": result})

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def retriever(corpus_file):
    server = _Retriever(BM25Index.from_corpus_file(corpus_file))
    yield server
    server.close()


def _http_tool(url, **config):
    return SearchTool({"retrieval_service_url": url, "topk": 2, "retry_delay": 0.01, **config})


def test_http_backend_answers_like_the_local_one(retriever, corpus_file):
    tool = _http_tool(retriever.url + "/retrieve")
    text, reward, metrics = _run(tool.execute("id", {"query_list": ["capital of France?"]}))
    assert (text, reward, metrics["error"], metrics["num_passages"]) == (f"{PARIS}\n{BERLIN}", 0.0, 0, 2)
    assert retriever.bodies == [{"queries": ["capital of France?"], "topk": 2, "return_scores": True}]
    local = SearchTool({"corpus_path": corpus_file, "topk": 2})
    query = {"query_list": ["river Paris", "Germany"]}
    assert _run(tool.execute("id", query))[0] == _run(local.execute("id", query))[0]


def test_http_5xx_is_retried_then_succeeds(retriever):
    retriever.fail = 1
    text, _, metrics = _run(_http_tool(retriever.url + "/retrieve").execute("id", {"query_list": ["capital"]}))
    assert len(retriever.bodies) == 2 and metrics["error"] == 0
    assert text.startswith('Doc 1(Title: "Berlin")')  # the shorter of the two "capital" passages


def test_http_errors_become_the_tool_text(retriever):
    retriever.fail = 10
    tool = _http_tool(retriever.url + "/retrieve", max_retries=2)
    text, reward, metrics = _run(tool.execute("id", {"query_list": ["capital"]}))
    assert text == f"Error: search failed: retrieval server {retriever.url}/retrieve answered HTTP 500 after 3 attempts"
    assert (reward, metrics["error"], metrics["num_queries"], len(retriever.bodies)) == (0.0, 1, 1, 3)
    retriever.fail, retriever.bodies = 0, []
    text, _, _ = _run(_http_tool(retriever.url + "/missing").execute("id", {"query_list": ["capital"]}))
    assert text.endswith("answered HTTP 404") and len(retriever.bodies) == 1  # a 4xx is not retried
    text, _, _ = _run(_http_tool(retriever.url + "/short").execute("id", {"query_list": ["capital"]}))
    assert text.endswith("expected 'result' to hold 1 lists")
    retriever.delay = 0.5
    text, _, _ = _run(_http_tool(retriever.url + "/retrieve", timeout=0.1).execute("id", {"query_list": ["a"]}))
    assert text.endswith("did not answer within 0.1 s")


def test_connection_refused_becomes_the_tool_text():
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tool = _http_tool(f"http://127.0.0.1:{port}/retrieve")
    text, reward, metrics = _run(tool.execute("id", {"query_list": ["capital"]}))
    assert text.startswith(f"Error: search failed: retrieval server http://127.0.0.1:{port}/retrieve unreachable:")
    assert "refused" in text.lower() and reward == 0.0 and metrics["error"] == 1


@pytest.mark.parametrize("rate_limit, most", [(1, 1), (3, 3)])
def test_rate_limit_caps_searches_in_flight(retriever, rate_limit, most):
    retriever.delay = 0.2
    tool = _http_tool(retriever.url + "/retrieve", rate_limit=rate_limit)

    async def burst():
        return await asyncio.gather(*(tool.execute(str(i), {"query_list": ["capital"]}) for i in range(4)))

    assert all(metrics["error"] == 0 for _, _, metrics in _run(burst()))
    assert retriever.max_in_flight == most if most == 1 else 2 <= retriever.max_in_flight <= most

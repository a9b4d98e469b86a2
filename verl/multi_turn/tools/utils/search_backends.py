"""Retrieval backends behind ``SearchTool``: a local BM25 index and a Search-R1-style HTTP retriever.

Both answer ``search(queries, topk) -> one list of Passage per query`` and raise :class:`RetrievalError` with a
message meant for the model, so the tool can put the failure in its response and the trajectory goes on.

The local index is pure Python and holds the whole corpus in memory: it suits test corpora and small
domain collections (up to a few hundred thousand passages), not the 21M-passage Wikipedia dump, for which the
Search-R1 retrieval server is the right backend.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import re
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "Passage",
    "RetrievalError",
    "SearchBackend",
    "BM25Index",
    "HttpRetrievalBackend",
    "tokenize",
    "document_contents",
    "load_corpus",
]

_TOKEN = re.compile(r"\w+")


@dataclass
class Passage:
    """One retrieved passage: Search-R1 ``contents`` (first line the title, then the text) and its score."""

    contents: str
    score: float | None = None
    id: str | None = None


class RetrievalError(RuntimeError):
    """A search that could not be answered; the message is shown to the model."""


class SearchBackend(Protocol):
    """What ``SearchTool`` needs from a retriever."""

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """The ``topk`` best passages for each query, best first."""
        ...


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens (unicode ``\\w+`` runs); no stemming, so the index needs no language resources."""
    return _TOKEN.findall(text.lower())


def document_contents(doc: dict, where: str) -> str:
    """A corpus or retriever document as Search-R1 ``contents``: given as is, or built from ``title``/``text``."""
    if isinstance(doc.get("contents"), str):
        return doc["contents"]
    if isinstance(doc.get("text"), str):
        # the wiki-18 corpus writes the title quoted on the first line; built contents look the same
        title = doc.get("title")
        return f'"{title}"\n{doc["text"]}' if title else doc["text"]
    raise ValueError(f"{where}: expected a 'contents' string or 'title'/'text' fields, got keys {sorted(doc)}")


def load_corpus(path: str) -> list[tuple[str, str]]:
    """``(id, contents)`` pairs from a JSONL or parquet corpus file (rows without an ``id`` get their row number)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"corpus_path: no such file {path!r} (expected a .jsonl or .parquet corpus)")
    if path.endswith(".parquet"):
        import pandas as pd

        rows = pd.read_parquet(path).to_dict("records")
    else:
        rows = []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{lineno}: not a JSON object per line ({err})") from err
    corpus = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: row {i} is {type(row).__name__}, expected a JSON object")
        doc_id = row.get("id")
        corpus.append((str(i) if doc_id is None else str(doc_id), document_contents(row, f"{path}: row {i}")))
    if not corpus:
        raise ValueError(f"corpus_path: {path!r} holds no documents")
    return corpus


class BM25Index:
    """Okapi BM25 over an in-memory corpus: ``idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``.

    ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`` (the Lucene form, never negative). A term repeated in the
    query counts once per occurrence. The defaults k1=0.9, b=0.4 are Pyserini's, which Search-R1's BM25 uses.
    """

    def __init__(self, documents: list[str], ids: list[str] | None = None, k1: float = 0.9, b: float = 0.4):
        if not documents:
            raise ValueError("BM25Index: the corpus is empty")
        if ids is not None and len(ids) != len(documents):
            raise ValueError(f"BM25Index: {len(ids)} ids for {len(documents)} documents")
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25Index: need k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.documents = list(documents)
        self.ids = list(ids) if ids is not None else [str(i) for i in range(len(documents))]
        self.k1, self.b = k1, b
        self.postings: dict[str, list[tuple[int, int]]] = {}
        lengths = []
        for doc_idx, text in enumerate(self.documents):
            counts = Counter(tokenize(text))
            lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                self.postings.setdefault(term, []).append((doc_idx, tf))
        n_docs = len(self.documents)
        avgdl = sum(lengths) / n_docs or 1.0  # a corpus of empty documents has nothing to normalise
        self.idf = {t: math.log(1 + (n_docs - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self.postings.items()}
        # the per-document part of the denominator, computed once instead of per query term
        self._norm = [k1 * (1 - b + b * dl / avgdl) for dl in lengths]

    @classmethod
    def from_corpus_file(cls, path: str, k1: float = 0.9, b: float = 0.4) -> BM25Index:
        """An index over a JSONL/parquet corpus file (see :func:`load_corpus`)."""
        corpus = load_corpus(path)
        return cls([c for _, c in corpus], [i for i, _ in corpus], k1=k1, b=b)

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every document sharing a term with ``query``, keyed by document index."""
        scores: dict[int, float] = {}
        for term in tokenize(query):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for doc_idx, tf in self.postings[term]:
                gain = idf * tf * (self.k1 + 1) / (tf + self._norm[doc_idx])
                scores[doc_idx] = scores.get(doc_idx, 0.0) + gain
        return scores

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """The ``topk`` best-scoring passages per query (ties go to the earlier document; no match, no passage)."""
        results = []
        for query in queries:
            scores = self.scores(query)
            best = heapq.nlargest(topk, scores.items(), key=lambda item: (item[1], -item[0]))
            results.append([Passage(self.documents[i], s, self.ids[i]) for i, s in best])
        return results


class HttpRetrievalBackend:
    """Client of a Search-R1 retrieval server: POST ``{"queries", "topk", "return_scores": true}`` to ``url``.

    5xx answers are retried ``max_retries`` times with a linearly growing pause; a refused connection, a
    timeout, a 4xx or a malformed answer fails at once, since repeating it would only make the rollout wait.
    """

    def __init__(self, url: str, timeout: float = 30.0, max_retries: int = 3, retry_delay: float = 1.0):
        if max_retries < 0 or retry_delay < 0:
            raise ValueError(
                f"SearchTool config: need max_retries >= 0 and retry_delay >= 0, got {max_retries}, {retry_delay}"
            )
        self.url, self.timeout = url, timeout
        self.max_retries, self.retry_delay = max_retries, retry_delay

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """Ask the server; one list of passages per query."""
        body = json.dumps({"queries": queries, "topk": topk, "return_scores": True}).encode()
        for attempt in range(self.max_retries + 1):
            request = urllib.request.Request(
                self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    payload = response.read()
                break
            except urllib.error.HTTPError as err:
                err.close()  # the error carries the open response
                if err.code < 500 or attempt == self.max_retries:
                    tries = f" after {attempt + 1} attempts" if attempt else ""
                    raise RetrievalError(f"retrieval server {self.url} answered HTTP {err.code}{tries}") from err
                time.sleep(self.retry_delay * (attempt + 1))
            except OSError as err:  # URLError (refused, unknown host) and timeouts are OSErrors
                reason = getattr(err, "reason", err)
                if isinstance(reason, TimeoutError):
                    raise RetrievalError(f"retrieval server {self.url} did not answer within {self.timeout} s") from err
                raise RetrievalError(f"retrieval server {self.url} unreachable: {reason}") from err
        return self._parse(payload, len(queries))

    def _parse(self, payload: bytes, n_queries: int) -> list[list[Passage]]:
        try:
            result = json.loads(payload)["result"]
        except (ValueError, KeyError, TypeError) as err:
            raise RetrievalError(f"retrieval server {self.url} sent no JSON 'result' field") from err
        if not isinstance(result, list) or len(result) != n_queries:
            raise RetrievalError(f"retrieval server {self.url}: expected 'result' to hold {n_queries} lists")
        try:
            return [[self._passage(item) for item in per_query] for per_query in result]
        except (ValueError, AttributeError, TypeError) as err:
            raise RetrievalError(f"retrieval server {self.url} sent a malformed document: {err}") from err

    def _passage(self, item: dict) -> Passage:
        # with return_scores the items are {"document": {...}, "score": s}; without, the documents themselves
        doc = item.get("document", item)
        return Passage(document_contents(doc, self.url), item.get("score"), doc.get("id"))

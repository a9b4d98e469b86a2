"""A generative judge as a verl reward-loop reward function: prompt template, call, parser.

``compute_score`` has verl's reward-loop signature: the trainer passes ``reward_router_address`` (``host:port`` of the
served judge's OpenAI-style router) and ``reward_model_tokenizer``. It formats the judge prompt, posts one
chat-completions request, and parses a 0-9 grade from the reply into a score in [0, 1]. The same file runs under
verl >= 0.6 unchanged. Only the standard library is used (aiohttp works the same way where it is installed).
"""

import asyncio
import json
import re
import urllib.request

JUDGE_PROMPT = (
    "You are grading an answer to an arithmetic problem.\n"
    "Problem: {question}\n"
    "Answer: {answer}\n"
    "Reply with one digit from 0 (wrong) to 9 (certainly right).\n"
    "Grade:"
)

SAMPLING = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 4}


def parse_grade(reply: str) -> float:
    """The first digit of the judge's reply, scaled to [0, 1]; 0.0 when it gives none."""
    match = re.search(r"[0-9]", reply or "")
    return int(match.group()) / 9.0 if match else 0.0


def _post(url: str, payload: dict, timeout: float) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


async def chat_complete(router_address: str, chat_complete_request: dict, timeout: float = 60.0) -> dict:
    """POST ``chat_complete_request`` to ``http://{router_address}/v1/chat/completions`` without blocking the loop."""
    url = f"http://{router_address}/v1/chat/completions"
    return await asyncio.to_thread(_post, url, chat_complete_request, timeout)


async def compute_score(
    data_source,
    solution_str,
    ground_truth,
    extra_info=None,
    reward_router_address=None,
    reward_model_tokenizer=None,
):
    """The judge's grade of ``solution_str`` in [0, 1], with the reply kept as extra info."""
    question = (extra_info or {}).get("question", "")
    messages = [{"role": "user", "content": JUDGE_PROMPT.format(question=question, answer=solution_str.strip())}]
    result = await chat_complete(reward_router_address, {"messages": messages, **SAMPLING})
    reply = result["choices"][0]["message"]["content"]
    return {"score": parse_grade(reply), "judge_reply_chars": len(reply)}

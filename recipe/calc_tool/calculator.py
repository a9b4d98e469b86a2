"""The ``calculator`` tool: a small recursive-descent arithmetic parser (never ``eval``) behind verl's BaseTool.

Grammar: ``expr := term (("+"|"-") term)*``, ``term := unary (("*"|"/"|"//"|"%") unary)*``,
``unary := ("-"|"+") unary | power``, ``power := atom ("**" unary)?``, ``atom := number | "(" expr ")"``. Names,
calls, attributes and anything else are refused; so are exponents or results too large to be arithmetic a model
needs (they would let one call burn CPU or memory).
"""

from __future__ import annotations

import asyncio
import re
from fractions import Fraction
from typing import Any

from verl.multi_turn.tools.base_tool import BaseTool
from verl.multi_turn.tools.schemas import OpenAIFunctionToolSchema

__all__ = ["BUSY", "CalculatorError", "CalculatorTool", "evaluate", "format_number"]

BUSY = "busy"  # the answer to a call the service turns away (create_kwargs busy_calls): call again

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**30
MAX_DEPTH = 32  # nesting of parentheses / unary signs: bounds the recursion
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?|\.\d+)|(\*\*|//|[-+*/%()]))")

SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression (+, -, *, /, //, %, **, parentheses) exactly.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "The expression, e.g. 37*45"}},
            "required": ["expression"],
        },
    },
}


class CalculatorError(ValueError):
    """An expression the calculator refuses (syntax, names, division by zero, too large)."""


def _tokenize(text: str) -> list[tuple[str, str]]:
    """``(kind, text)`` tokens, kind ``num`` or ``op``; anything else (a name, a comma, a quote) is refused."""
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise CalculatorError(f"unexpected character {text[pos:].lstrip()[:1]!r} at position {pos}")
        tokens.append(("num", match.group(1)) if match.group(1) else ("op", match.group(2)))
        pos = match.end()
    return tokens


class _Parser:
    """Evaluates a token list with exact rational arithmetic (so 0.1+0.2 is 0.3)."""

    def __init__(self, tokens: list[tuple[str, str]]):
        self.tokens, self.pos, self.depth = tokens, 0, 0

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise CalculatorError("the expression ends too early")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take()[1] == "+" else value - self.term()
            _check(value)
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/", "//", "%"):
            op = self.take()[1]
            right = self.unary()
            if op != "*" and right == 0:
                raise CalculatorError("division by zero")
            if op == "*":
                value = value * right
            elif op == "/":
                value = value / right
            elif op == "//":
                value = Fraction(value // right)
            else:
                value = value % right
            _check(value)
        return value

    def unary(self) -> Fraction:
        if self.peek() in ("-", "+"):
            sign = self.take()[1]
            value = self._nested(self.unary)
            return -value if sign == "-" else value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() != "**":
            return base
        self.take()
        exponent = self._nested(self.unary)
        if exponent.denominator != 1:
            raise CalculatorError("only whole-number exponents are supported")
        if abs(exponent) > MAX_EXPONENT and abs(base) not in (0, 1):
            raise CalculatorError(f"exponent {exponent} is too large (at most {MAX_EXPONENT})")
        if base == 0 and exponent < 0:
            raise CalculatorError("division by zero")
        return _check(base ** int(exponent))

    def atom(self) -> Fraction:
        kind, text = self.take()
        if kind == "num":
            return _check(Fraction(text))
        if text != "(":
            raise CalculatorError(f"unexpected {text!r}")
        value = self._nested(self.expr)
        if self.take()[1] != ")":
            raise CalculatorError("a '(' is not closed")
        return value

    def _nested(self, rule) -> Fraction:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise CalculatorError(f"the expression nests deeper than {MAX_DEPTH}")
        try:
            return rule()
        finally:
            self.depth -= 1


def _check(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise CalculatorError(f"the result is too large (more than {MAX_MAGNITUDE:.0e})")
    return value


def evaluate(expression: str) -> Fraction:
    """The exact value of an arithmetic expression; raises CalculatorError for anything else."""
    if not isinstance(expression, str):
        raise CalculatorError(f"the expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    parser = _Parser(_tokenize(expression))
    if not parser.tokens:
        raise CalculatorError("the expression is empty")
    value = parser.expr()
    if parser.pos != len(parser.tokens):
        raise CalculatorError(f"unexpected {parser.peek()!r} after a complete expression")
    return value


def format_number(value: Fraction) -> str:
    """An integer as its digits; anything else as a decimal rounded to 10 places, trailing zeros dropped."""
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.10f}".rstrip("0").rstrip(".")
    return text if text not in ("-0", "") else "0"


class CalculatorTool(BaseTool):
    """``calculator(expression)``: the exact value as text, or ``Error: ...`` for an expression it refuses.

    Like a remote service, it can be slow and busy: ``config["latency_s"]`` (default 0) is waited (idle, an
    ``asyncio.sleep``) on every call, and a trajectory created with ``busy_calls=k`` (a row's
    ``tools_kwargs.calculator.create_kwargs``) is answered ``busy`` on its first ``k`` calls, so it needs ``k + 1``
    calls (and ``k + 2`` assistant turns) to get its answer: the benchmark's long tail of turn counts.
    """

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema)
        self.latency_s = float(self.config.get("latency_s", 0.0))
        if self.latency_s < 0:
            raise ValueError(f"calculator config latency_s={self.latency_s}; expected seconds >= 0")
        self._busy: dict[str, int] = {}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """The built-in schema, used when the tool config gives none."""
        return OpenAIFunctionToolSchema.model_validate(SCHEMA)

    async def create(self, instance_id: str | None = None, busy_calls: int = 0, **kwargs) -> str:
        instance_id = await super().create(instance_id)
        if busy_calls:
            self._busy[instance_id] = int(busy_calls)
        return instance_id

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[str, float, dict]:
        """Evaluate ``parameters["expression"]``; a refusal is an answer to the model, not an exception."""
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if self._busy.get(instance_id, 0) > 0:
            self._busy[instance_id] -= 1
            return BUSY, 0.0, {"ok": False, "busy": True}
        try:
            return format_number(evaluate(parameters.get("expression"))), 0.0, {"ok": True}
        except CalculatorError as e:
            return f"Error: {e}", 0.0, {"ok": False}

    async def release(self, instance_id: str, **kwargs) -> None:
        self._busy.pop(instance_id, None)

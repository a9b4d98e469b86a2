"""Parse a model's math answer into a sympy expression without ever evaluating the text.

A policy under RL writes whatever earns reward, so a scorer must treat its answer as hostile. sympy's ``parse_expr``
(and ``sympify``) run Python's ``eval`` on the string: ``__import__('os').system(...)`` inside a ``\\boxed{}`` would
run in the reward process. This module reads the answer token by token with a small recursive-descent grammar and
builds the expression from sympy constructors, so only numbers, single names, the arithmetic operators, parentheses
and a fixed set of functions can appear; anything else is "does not parse". Sizes are bounded too: answer length,
nesting depth, and the exponents of numeric powers (``9^9^9`` would otherwise take the process's memory).
"""

from __future__ import annotations

import re

__all__ = ["parse_math", "latex_to_plain", "symbolic_equal"]

MAX_ANSWER_CHARS = 256
MAX_DEPTH = 32
MAX_NUMERIC_EXPONENT = 1000
MAX_POWER_BITS = 1 << 16  # a rational power's result, in bits of numerator or denominator

# numbers, names (letters only: no underscores, dots or quotes, so no attribute or dunder access), operators
_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*|\.\d+)|([A-Za-z]+)|(\*\*|[-+*/^(),]))")


class _Unparsable(Exception):
    """The answer is outside the grammar or over a size bound."""


def _functions():
    import sympy

    return {
        "sqrt": sympy.sqrt,
        "sin": sympy.sin,
        "cos": sympy.cos,
        "tan": sympy.tan,
        "log": sympy.log,
        "ln": sympy.log,
        "exp": sympy.exp,
        "abs": sympy.Abs,
    }


def _constants():
    import sympy

    return {"pi": sympy.pi, "E": sympy.E, "I": sympy.I, "oo": sympy.oo}


def _tokens(text: str) -> list[tuple[str, str]]:
    """``[(kind, text)]`` with kind in ``num``, ``name``, ``op``; raises on any other character."""
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise _Unparsable(f"unexpected character {text[pos]!r}")
        kind = "num" if m.group(1) else "name" if m.group(2) else "op"
        out.append((kind, m.group(m.lastindex)))
        pos = m.end()
    return out


class _Parser:
    """expr := term (('+'|'-') term)* ; term := unary (('*'|'/') unary | power)* ; unary := ('+'|'-') unary | power ;
    power := atom (('^'|'**') unary)? ; atom := number | constant | symbol | function '(' expr ')' | '(' expr ')'"""

    def __init__(self, tokens: list[tuple[str, str]]):
        import sympy

        self.sympy = sympy
        self.tokens, self.pos, self.depth = tokens, 0, 0
        self.functions, self.constants = _functions(), _constants()

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise _Unparsable("unexpected end")
        token = self.tokens[self.pos]
        if expected is not None and token[1] != expected:
            raise _Unparsable(f"expected {expected!r}, got {token[1]!r}")
        self.pos += 1
        return token

    def parse(self):
        value = self.expr()
        if self.pos != len(self.tokens):
            raise _Unparsable(f"trailing {self.peek()!r}")
        return value

    def expr(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Unparsable("nested too deeply")
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        self.depth -= 1
        return value

    def term(self):
        value = self.unary()
        while True:
            if self.peek() in ("*", "/"):
                op = self.take()[1]
                rhs = self.unary()
                value = value * rhs if op == "*" else value / rhs
            elif self._starts_atom():  # implicit multiplication: 2x, 2sqrt(3), (a)(b)
                value = value * self.power()
            else:
                return value

    def _starts_atom(self) -> bool:
        if self.pos >= len(self.tokens):
            return False
        kind, text = self.tokens[self.pos]
        return kind in ("num", "name") or text == "("

    def unary(self):
        if self.peek() in ("+", "-"):
            op = self.take()[1]
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _Unparsable("nested too deeply")
            value = self.unary()
            self.depth -= 1
            return -value if op == "-" else value
        return self.power()

    def power(self):
        base = self.atom()
        if self.peek() in ("^", "**"):
            self.take()
            exponent = self.unary()
            if exponent.is_number and base.is_number:
                magnitude = abs(complex(exponent.evalf(15))) if exponent.is_finite else float("inf")
                if magnitude > MAX_NUMERIC_EXPONENT:
                    raise _Unparsable("numeric exponent too large")
                if base.is_Rational:
                    bits = max(abs(base.p).bit_length(), abs(base.q).bit_length())
                    if bits * magnitude > MAX_POWER_BITS:
                        raise _Unparsable("numeric power too large")
            return self.sympy.Pow(base, exponent)
        return base

    def atom(self):
        kind, text = self.take()
        if kind == "num":
            return self.sympy.Rational(text) if "." in text else self.sympy.Integer(text)
        if kind == "name":
            if text in self.functions:
                self.take("(")
                argument = self.expr()
                self.take(")")
                return self.functions[text](argument)
            if text in self.constants:
                return self.constants[text]
            if len(text) > 1:  # a variable is one letter; a longer word is prose or code
                raise _Unparsable(f"unknown name {text!r}")
            return self.sympy.Symbol(text)
        if text == "(":
            value = self.expr()
            self.take(")")
            return value
        raise _Unparsable(f"unexpected {text!r}")


def parse_math(text: str):
    """The sympy expression ``text`` spells in plain math notation, or None if it is outside the grammar.

    Accepts numbers, one-letter variables, ``+ - * / ^ **``, parentheses, implicit multiplication (``2x``),
    ``pi E I oo`` and ``sqrt sin cos tan log ln exp abs`` applied with parentheses. Never evaluates the text as code.
    """
    if not isinstance(text, str) or len(text) > MAX_ANSWER_CHARS:
        return None
    try:
        tokens = _tokens(text)
        return _Parser(tokens).parse() if tokens else None
    except (_Unparsable, ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError):
        return None


_LATEX_WORDS = {
    "\\pi": " pi ",
    "\\cdot": "*",
    "\\times": "*",
    "\\div": "/",
    "\\infty": " oo ",
    "\\left": "",
    "\\right": "",
    "\\,": "",
    "\\!": "",
    "\\%": "",
    "^\\circ": "",
    "^{\\circ}": "",
    "\\circ": "",
    "\\dfrac": "\\frac",
    "\\tfrac": "\\frac",
    "$": "",
}
_FRAC = re.compile(r"\\frac\{([^{}]*)\}\{([^{}]*)\}")
_FRAC_DIGITS = re.compile(r"\\frac(\d)(\d)")
_SQRT = re.compile(r"\\sqrt\{([^{}]*)\}")
_SQRT_DIGIT = re.compile(r"\\sqrt(\d)")


def latex_to_plain(text: str) -> str:
    """Rewrite the LaTeX of a short math answer (``2\\sqrt{3}``, ``\\frac{40}{3}``, ``x^{2}``) in plain notation.

    String rewriting only; what comes out still has to pass :func:`parse_math`'s grammar.
    """
    if len(text) > MAX_ANSWER_CHARS:
        return text
    for word, plain in _LATEX_WORDS.items():
        text = text.replace(word, plain)
    for _ in range(MAX_DEPTH):  # innermost first, so nested fractions and roots unwind
        rewritten = _SQRT.sub(r"sqrt(\1)", _FRAC.sub(r"((\1)/(\2))", text))
        rewritten = _SQRT_DIGIT.sub(r"sqrt(\1)", _FRAC_DIGITS.sub(r"((\1)/(\2))", rewritten))
        if rewritten == text:
            break
        text = rewritten
    return text.replace("{", "(").replace("}", ")")


def _difference_is_zero(a: str, b: str) -> bool:
    import sympy

    left, right = parse_math(a), parse_math(b)
    if left is None or right is None:
        return False
    return sympy.simplify(left - right) == 0


def symbolic_equal(a: str, b: str, timeout_s: float = 5.0) -> bool:
    """Whether two answers (plain or LaTeX) are the same expression, decided by sympy under a deadline.

    Both sides go through :func:`parse_math`; ``sympy.simplify`` can run for minutes on adversarial input, hence the
    deadline (a timeout counts as "not equal").
    """
    from verl.utils.reward_score.guarded_call import GuardedCall

    ok, equal, _ = GuardedCall(_difference_is_zero, timeout_s=timeout_s)(latex_to_plain(a), latex_to_plain(b))
    return bool(ok and equal)

"""MATH (Hendrycks) rule reward: the last ``\\boxed{...}`` must equal the ground truth after normalisation."""

from __future__ import annotations

__all__ = ["compute_score", "last_boxed_only_string", "remove_boxed", "is_equiv", "strip_string"]


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 iff the last boxed answer of ``solution_str`` is equivalent to ``ground_truth``; else 0.0."""
    try:
        boxed = last_boxed_only_string(solution_str)
        if boxed is not None and is_equiv(remove_boxed(boxed), ground_truth):
            return 1.0
    except Exception:  # malformed model output must score 0, never crash the reward loop
        pass
    return 0.0


def last_boxed_only_string(string: str) -> str | None:
    """The last ``\\boxed{...}`` / ``\\fbox{...}`` (braces matched) or ``\\boxed x`` up to ``$``; None if absent."""
    if "\\boxed " in string:
        return "\\boxed " + string.split("\\boxed ")[-1].split("$")[0]
    start = string.rfind("\\boxed")
    if start < 0:
        start = string.rfind("\\fbox")
        if start < 0:
            return None
    depth = 0
    for i in range(start, len(string)):
        if string[i] == "{":
            depth += 1
        elif string[i] == "}":
            depth -= 1
            if depth == 0:
                return string[start : i + 1]
    return None


def remove_boxed(s: str) -> str:
    """Strip the ``\\boxed `` prefix, or the ``\\boxed{`` prefix and the closing ``}``."""
    if s.startswith("\\boxed "):
        return s[len("\\boxed ") :]
    left = "\\boxed{"
    assert s.startswith(left) and s.endswith("}"), f"not a \\boxed{{...}} string: {s!r}"
    return s[len(left) : -1]


def is_equiv(str1: str | None, str2: str | None, verbose: bool = False) -> bool:
    """Equality after :func:`strip_string` normalisation (raw equality if normalising fails)."""
    if str1 is None and str2 is None:
        return True
    if str1 is None or str2 is None:
        return False
    try:
        a, b = strip_string(str1), strip_string(str2)
        if verbose:
            print(a, b)
        return a == b
    except Exception:
        return str1 == str2


def _fix_fracs(string: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1b`` -> ``\\frac{1}{b}``, ``\\frac{1}2`` -> ``\\frac{1}{2}``."""
    parts = string.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part.startswith("{"):
            out += part
            continue
        if len(part) < 2:
            return string
        a, b, rest = part[0], part[1], part[2:]
        if b != "{":
            out += "{" + a + "}{" + b + "}" + rest
        else:
            out += "{" + a + "}" + b + rest
    return out


def _fix_a_slash_b(string: str) -> str:
    """``"a/b"`` with integers a, b -> ``\\frac{a}{b}``."""
    if len(string.split("/")) != 2:
        return string
    a, b = string.split("/")
    try:
        a_int, b_int = int(a), int(b)
    except ValueError:
        return string
    if string != f"{a_int}/{b_int}":
        return string
    return "\\frac{" + str(a_int) + "}{" + str(b_int) + "}"


def _remove_right_units(string: str) -> str:
    """Drop a trailing ``\\text{ units}``."""
    if "\\text{ " in string:
        return string.split("\\text{ ")[0]
    return string


def _fix_sqrt(string: str) -> str:
    """``\\sqrt3`` -> ``\\sqrt{3}``."""
    if "\\sqrt" not in string:
        return string
    parts = string.split("\\sqrt")
    out = parts[0]
    for part in parts[1:]:
        if part and part[0] != "{":
            out += "\\sqrt{" + part[0] + "}" + part[1:]
        else:
            out += "\\sqrt" + part
    return out


def strip_string(string: str) -> str:
    """Normalise a LaTeX answer (units, spacing, fractions, degrees, percent, ...) for string comparison."""
    string = string.replace("\n", "")
    string = string.replace("\\!", "")
    string = string.replace("\\\\", "\\")
    string = string.replace("tfrac", "frac").replace("dfrac", "frac")
    string = string.replace("\\left", "").replace("\\right", "")
    string = string.replace("^{\\circ}", "").replace("^\\circ", "")
    string = string.replace("\\$", "")
    string = _remove_right_units(string)
    string = string.replace("\\%", "").replace("%", "")
    string = string.replace(" .", " 0.").replace("{.", "{0.")
    if len(string) == 0:
        return string
    if string[0] == ".":
        string = "0" + string
    # "k = 3" -> "3" when the left side is a short variable name
    if len(string.split("=")) == 2 and len(string.split("=")[0]) <= 2:
        string = string.split("=")[1]
    string = _fix_sqrt(string)
    string = string.replace(" ", "")
    string = _fix_fracs(string)
    if string == "0.5":
        string = "\\frac{1}{2}"
    string = _fix_a_slash_b(string)
    return string

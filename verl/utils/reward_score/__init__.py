"""Rule-based reward functions and ``default_compute_score``, which routes a sample to one by its data source."""

from __future__ import annotations

from verl.utils.import_utils import deprecated

__all__ = ["default_compute_score", "_default_compute_score"]

_PRIME_MATH_SOURCES = (
    "numina_aops_forum",
    "numina_synthetic_math",
    "numina_amc_aime",
    "numina_synthetic_amc",
    "numina_cn_k12",
    "numina_olympiads",
)
_CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")
_SEARCH_R1_SOURCES = (
    "searchR1_nq",
    "searchR1_triviaqa",
    "searchR1_popqa",
    "searchR1_hotpotqa",
    "searchR1_2wikimultihopqa",
    "searchR1_musique",
    "searchR1_bamboogle",
)


def default_compute_score(
    data_source,
    solution_str,
    ground_truth,
    extra_info=None,
    sandbox_fusion_url=None,
    concurrent_semaphore=None,
    memory_limit_mb=None,
):
    """Score one response with the rule for ``data_source``: a float, or a dict with at least ``"score"``.

    Raises NotImplementedError for a data source without a built-in rule (give a custom_reward_function).
    """
    if data_source == "openai/gsm8k":
        from verl.utils.reward_score import gsm8k

        res = gsm8k.compute_score(solution_str, ground_truth)
    elif data_source in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval"):
        from verl.utils.reward_score import math

        res = math.compute_score(solution_str, ground_truth)
    elif data_source == "math_dapo" or data_source.startswith("aime"):
        from verl.utils.reward_score import math_dapo

        res = math_dapo.compute_score(solution_str, ground_truth)
    elif data_source in _PRIME_MATH_SOURCES:
        from verl.utils.reward_score import prime_math

        res = prime_math.compute_score(solution_str, ground_truth)
    elif data_source in _CODE_SOURCES:
        if sandbox_fusion_url:
            from verl.utils.reward_score import sandbox_fusion

            res = sandbox_fusion.compute_score(
                sandbox_fusion_url, concurrent_semaphore, memory_limit_mb, solution_str, ground_truth, continuous=True
            )
        else:
            from verl.utils.reward_score import prime_code

            res = prime_code.compute_score(solution_str, ground_truth, continuous=True)
    elif data_source == "hiyouga/geometry3k":
        from verl.utils.reward_score import geo3k

        res = geo3k.compute_score(solution_str, ground_truth)
    elif data_source == "verl/arithmetic":
        from verl.utils.reward_score import arithmetic

        res = arithmetic.compute_score(solution_str, ground_truth)
    elif data_source == "verl/word_problems":
        from verl.utils.reward_score import word_problems

        res = word_problems.compute_score(solution_str, ground_truth)
    elif data_source in _SEARCH_R1_SOURCES:
        from verl.utils.reward_score import search_r1_like_qa_em

        res = search_r1_like_qa_em.compute_score(solution_str, ground_truth)
    else:
        raise NotImplementedError(f"Reward function is not implemented for {data_source=}")

    if isinstance(res, dict):
        return res
    if isinstance(res, int | float | bool):
        return float(res)
    return float(res[0])


@deprecated("verl.utils.reward_score.default_compute_score")
def _default_compute_score(
    data_source,
    solution_str,
    ground_truth,
    extra_info=None,
    sandbox_fusion_url=None,
    concurrent_semaphore=None,
    memory_limit_mb=None,
):
    """Deprecated alias of :func:`default_compute_score`."""
    return default_compute_score(
        data_source, solution_str, ground_truth, extra_info, sandbox_fusion_url, concurrent_semaphore, memory_limit_mb
    )

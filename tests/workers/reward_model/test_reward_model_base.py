"""verl.workers.reward_model: the BasePPORewardModel interface."""

import pytest
import torch

from verl import DataProto
from verl.workers.reward_model import BasePPORewardModel


def test_base_is_abstract_and_a_subclass_scores_a_batch():
    with pytest.raises(TypeError, match="compute_reward"):
        BasePPORewardModel({"enable": True})

    class LastTokenIsScore(BasePPORewardModel):
        def compute_reward(self, data: DataProto) -> DataProto:
            mask = data.batch["response_mask"]
            last = mask.cumsum(-1) == mask.sum(-1, keepdim=True)
            scores = torch.where(last & mask.bool(), data.batch["responses"].float() * self.config["scale"], 0.0)
            return DataProto.from_dict({"rm_scores": scores})

    rm = LastTokenIsScore({"scale": 0.5})
    assert rm.config == {"scale": 0.5}
    data = DataProto.from_dict(
        {"responses": torch.tensor([[3, 4, 0], [5, 6, 7]]), "response_mask": torch.tensor([[1, 1, 0], [1, 1, 1]])}
    )
    assert rm.compute_reward(data).batch["rm_scores"].tolist() == [[0.0, 2.0, 0.0], [0.0, 0.0, 3.5]]

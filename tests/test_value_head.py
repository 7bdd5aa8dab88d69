"""The value head: zero at the start (the first advantages are the rewards), and saved beside
the policy as the weights it holds."""

import torch
from safetensors.torch import load_file

from rlhflab.config import load_config
from rlhflab.models.lm import build_tiny_lm
from rlhflab.models.value_head import VALUE_HEAD_FILE, PolicyWithValue
from rlhflab.worlds.reviews import ReviewsWorld


def tiny_policy() -> PolicyWithValue:
    config = load_config("smoke", overrides={"pretrain.n_layer": 1, "pretrain.n_embd": 32, "pretrain.n_head": 2})
    return PolicyWithValue(build_tiny_lm(ReviewsWorld().tokenizer(), config.pretrain, 0))


def test_the_first_values_are_zero():
    policy = tiny_policy()
    ids = torch.randint(5, 50, (3, 9))
    mask = torch.ones_like(ids, dtype=torch.bool)
    _, values = policy(ids, mask, prompt_len=4, temperature=1.0)
    assert values.shape == (3, 5) and bool((values == 0).all())


def test_the_saved_head_is_the_one_the_policy_holds(tmp_path):
    policy = tiny_policy()
    with torch.no_grad():
        policy.value_head.weight.normal_()
        policy.value_head.bias.fill_(0.25)
    policy.save(tmp_path / "policy")
    saved = load_file(str(tmp_path / "policy" / VALUE_HEAD_FILE))
    assert set(saved) == {"weight", "bias"}
    assert torch.equal(saved["weight"], policy.value_head.weight) and torch.equal(saved["bias"], policy.value_head.bias)

"""The math refuses what it cannot compute, naming it: a mask that is not boolean, shapes that
do not match, a negative clip range or coefficient, an n-gram order below 1. Each case is
one call that would otherwise return a number computed from the wrong thing."""

import pytest
import torch

from rlhflab.metrics.diversity import distinct_n, self_bleu
from rlhflab.models.bradley_terry import bt_loss
from rlhflab.ppo.advantages import gae, shape_rewards
from rlhflab.ppo.kl import AdaptiveKLController, FixedKLController
from rlhflab.ppo.losses import policy_loss, value_loss

M = torch.ones((2, 3), dtype=torch.bool)
X = torch.zeros((2, 3))

CASES = {
    "gae: rewards and mask of other shapes": (lambda: gae(torch.zeros((2, 4)), X, M, 1.0, 0.95), ValueError),
    "gae: a mask that is not boolean": (lambda: gae(X, X, M.float(), 1.0, 0.95), TypeError),
    "shape_rewards: one score per row": (lambda: shape_rewards(torch.zeros(3), X, X, M, 0.1), ValueError),
    "shape_rewards: a mask that is not boolean": (lambda: shape_rewards(torch.zeros(2), X, X, M.long(), 0.1),
                                                  TypeError),
    "policy_loss: a negative clip range": (lambda: policy_loss(X, X, X, M, -0.1), ValueError),
    "value_loss: a negative clip range": (lambda: value_loss(X, X, X, M, -0.1), ValueError),
    "distinct_n: an order below 1": (lambda: distinct_n(["a b"], 0), ValueError),
    "self_bleu: an order below 1": (lambda: self_bleu(["a b", "b c"], 0), ValueError),
    "bt_loss: chosen and rejected of other shapes": (lambda: bt_loss(torch.zeros(3), torch.zeros(2)), ValueError),
    "fixed controller: a negative coefficient": (lambda: FixedKLController(-0.1), ValueError),
    "adaptive controller: a negative coefficient": (lambda: AdaptiveKLController(-0.1, 6.0, 100), ValueError),
    "adaptive controller: a target of 0": (lambda: AdaptiveKLController(0.1, 0.0, 100), ValueError),
    "adaptive controller: a horizon of 0": (lambda: AdaptiveKLController(0.1, 6.0, 0), ValueError),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_math_refuses_what_it_cannot_compute(case):
    call, error = CASES[case]
    with pytest.raises(error) as raised:
        call()
    assert str(raised.value)  # says what was wrong


def test_sampling_over_two_processes_refuses_one_shared_generator():
    from rlhflab.distributed import Cluster
    from rlhflab.models.sampling import sample_responses, sample_share
    from rlhflab.worlds.reviews import ReviewsWorld

    tokenizer = ReviewsWorld().tokenizer()
    with pytest.raises(ValueError, match="one random stream per row"):
        sample_share(sample_responses, torch.nn.Linear(2, 2), tokenizer, ["the film", "the plot"], 4, 1.0,
                     torch.Generator().manual_seed(0), Cluster(0, 2))


def test_a_line_of_a_runs_own_log_that_is_not_json_is_named_by_its_number(tmp_path):
    from rlhflab.runs import read_jsonl

    log = tmp_path / "ppo.jsonl"
    log.write_text('{"step": 0}\n\n{"step": 1\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"ppo.jsonl:3: invalid JSON"):
        read_jsonl(log)


def test_a_rule_is_registered_once_and_only_from_a_rule_family():
    from rlhflab.doctor.rules.registry import rule

    def detect(table):
        return None

    with pytest.raises(ValueError, match="registered twice"):
        rule("kl_negative", "exploding_kl")(detect)
    with pytest.raises(ValueError, match="is not a rule family"):
        rule("a_new_rule_outside_the_families", "exploding_kl")(detect)

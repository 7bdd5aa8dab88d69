"""Importance-sampling corrections and the mismatch metrics against hand computations, the
rollout config's keys, and the sampler seam (a sampler is pushed the weights after every
update, and only then)."""

from __future__ import annotations

import math
import typing
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from rlhflab.config import PUBLISHED_CORRECTION_MAX, ConfigError, RolloutConfig, load_config
from rlhflab.errors import MissingExtra
from rlhflab.models.sampling import sample_responses
from rlhflab.ppo import losses
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.correction import correction_metrics, importance_weights, mismatch_metrics
from rlhflab.ppo.samplers import SAMPLERS, NativeSampler, check_engine, start_sampler

# Two responses, three positions; the second has a padded last position.
TRAINER = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]])
SAMPLER = torch.tensor([[-1.5, -1.0, -0.5], [-0.2, -0.9, -4.0]])
MASK = torch.tensor([[True, True, True], [True, True, False]])


def test_token_truncation_is_min_of_ratio_and_cap():
    c = importance_weights(TRAINER, SAMPLER, MASK, "token_truncate", None, 1.5)
    expected = torch.tensor([[1.5, math.exp(-1.0), 1.0], [math.exp(-0.1), math.exp(0.2), 0.0]])
    torch.testing.assert_close(c.weights, expected)
    assert c.changed_frac == pytest.approx(1 / 5)  # only exp(0.5) = 1.65 was cut


def test_truncation_raises_to_the_lower_bound_when_one_is_set():
    c = importance_weights(TRAINER, SAMPLER, MASK, "token_truncate", 0.5, 1.5)
    expected = torch.tensor([[1.5, 0.5, 1.0], [math.exp(-0.1), math.exp(0.2), 0.0]])
    torch.testing.assert_close(c.weights, expected)
    assert c.changed_frac == pytest.approx(2 / 5)


def test_sequence_truncation_uses_the_product_of_the_real_tokens_ratios():
    c = importance_weights(TRAINER, SAMPLER, MASK, "sequence_truncate", None, 1.0)
    first, second = math.exp(0.5 - 1.0 + 0.0), math.exp(-0.1 + 0.2)  # the padded -4.0 is not a token
    expected = torch.tensor([[first] * 3, [min(second, 1.0), min(second, 1.0), 0.0]])
    torch.testing.assert_close(c.weights, expected)
    assert c.changed_frac == pytest.approx(2 / 5)  # the second sequence's ratio 1.105 was cut to 1


def test_masks_zero_what_falls_outside_the_bounds():
    token = importance_weights(TRAINER, SAMPLER, MASK, "token_mask", 0.5, 1.5)
    expected = torch.tensor([[0.0, 0.0, 1.0], [math.exp(-0.1), math.exp(0.2), 0.0]])
    torch.testing.assert_close(token.weights, expected)
    assert token.changed_frac == pytest.approx(2 / 5)
    sequence = importance_weights(TRAINER, SAMPLER, MASK, "sequence_mask", 0.7, 3.0)
    # first sequence: exp(-0.5) = 0.607 < 0.7, dropped whole; second: exp(0.1) kept
    expected = torch.tensor([[0.0, 0.0, 0.0], [math.exp(0.1), math.exp(0.1), 0.0]])
    torch.testing.assert_close(sequence.weights, expected)


def test_no_correction_and_a_perfect_match():
    assert importance_weights(TRAINER, SAMPLER, MASK, "none", None, math.inf) is None
    assert correction_metrics(None, MASK) == {}
    same = importance_weights(TRAINER, TRAINER, MASK, "token_truncate", None, 2.0)
    torch.testing.assert_close(same.weights, MASK.float())
    assert same.changed_frac == 0.0


def test_a_weight_on_the_advantage_weights_the_clipped_objective():
    """PPO's loss with advantages w*A is the token mean of w * max(-rA, -clip(r)A), by hand."""
    logprobs = torch.tensor([[-0.9, -2.5, -0.4], [-0.1, -0.7, 0.0]])
    advantages = torch.tensor([[1.0, -2.0, 0.5], [-1.0, 3.0, 0.0]])
    weights = importance_weights(TRAINER, SAMPLER, MASK, "token_truncate", None, 1.5).weights
    loss, _ = losses.policy_loss(logprobs, TRAINER, advantages * weights, MASK, 0.2)
    hand, n = 0.0, 0
    for b in range(2):
        for t in range(3):
            if not MASK[b, t]:
                continue
            r = math.exp(float(logprobs[b, t] - TRAINER[b, t]))
            a, w = float(advantages[b, t]), float(weights[b, t])
            hand += w * max(-r * a, -min(max(r, 0.8), 1.2) * a)
            n += 1
    assert float(loss) == pytest.approx(hand / n, rel=1e-6)


def test_mismatch_metrics_by_hand():
    m = mismatch_metrics(TRAINER, SAMPLER, MASK)
    diffs = [0.5, -1.0, 0.0, -0.1, 0.2]
    assert m["mismatch/logp_abs_diff"] == pytest.approx(sum(abs(d) for d in diffs) / 5, rel=1e-6)
    # k3 of KL(sampler || trainer) from the sampler's draws: r - 1 - log r, r = p_trainer / p_sampler
    assert m["mismatch/kl"] == pytest.approx(sum(math.exp(d) - 1 - d for d in diffs) / 5, rel=1e-5)
    assert m["mismatch/is_ratio_mean"] == pytest.approx(sum(math.exp(d) for d in diffs) / 5, rel=1e-6)


def test_rollout_config_keys_and_their_errors():
    config = load_config("smoke", overrides=["rollout.correction=token_truncate"])
    assert config.rollout.correction_bounds() == (None, PUBLISHED_CORRECTION_MAX["token_truncate"]) == (None, 2.0)
    masked = load_config("smoke", overrides=["rollout.correction=sequence_mask", "rollout.correction_min=0.5"])
    assert masked.rollout.correction_bounds() == (0.5, 3.0)
    with pytest.raises(ConfigError, match="rollout.engine"):
        load_config("smoke", overrides=["rollout.engine=sglang"])
    with pytest.raises(ConfigError, match="correction_min"):
        load_config("smoke", overrides=["rollout.correction=token_mask", "rollout.correction_min=4"])
    with pytest.raises(ConfigError, match="correction_min = 1.2: expected a value <= 1"):
        load_config("smoke", overrides=["rollout.correction=sequence_mask", "rollout.correction_min=1.2"])
    with pytest.raises(ConfigError, match=r"correction_min = 1.5: .*correction_max = 3.0 \(the default of token_mask\)"):
        load_config("smoke", overrides=["rollout.correction=token_mask", "rollout.correction_min=1.5"])
    with pytest.raises(ConfigError, match=r"correction_max = 0.8: expected a value >= 1"):
        load_config("smoke", overrides=["rollout.correction=token_truncate", "rollout.correction_max=0.8"])
    with pytest.raises(ConfigError, match="lora.rank"):
        load_config("smoke", overrides=["rollout.engine=vllm", "lora.rank=4"])
    with pytest.raises(ConfigError, match="fsdp2"):
        load_config("smoke", overrides=["rollout.engine=vllm", "distributed.strategy=fsdp2"])
    assert set(SAMPLERS) == set(typing.get_args(typing.get_type_hints(RolloutConfig)["engine"]))


def test_choosing_vllm_without_it_installed_names_what_to_install(tmp_path):
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here")
    with pytest.raises(MissingExtra, match="make vllm"):
        start_sampler(sample_responses, tmp_path, RolloutConfig(engine="vllm"), 0, torch.device("cpu"))
    with pytest.raises(MissingExtra, match="make vllm"):  # and before a run starts
        check_engine(RolloutConfig(engine="vllm"), sample_responses)


class CountingSampler:
    """The sample component, counting the weights it is pushed (by their sum)."""

    is_trainer = True

    def __init__(self, sample) -> None:
        self.sample, self.pushes = sample, []

    def __call__(self, *args):
        return self.sample(*args)

    def push(self, lm) -> None:
        self.pushes.append(sum(float(p.detach().sum()) for p in lm.parameters()))

    def close(self) -> None:
        pass


def test_the_sampler_is_pushed_the_updated_weights_once_per_iteration(smoke_run):
    from rlhflab.ppo.state import load_ppo_state
    from rlhflab.ppo.trainer import ppo_iteration
    from rlhflab.worlds.reviews import ReviewsWorld

    config = load_config("smoke", overrides=["rollout.correction=token_truncate"])
    state = load_ppo_state(config, smoke_run, PPOComponents())
    assert isinstance(state.sampler, NativeSampler) and state.rollout_config == config.rollout
    sampler = CountingSampler(state.components.sample)
    state = replace(state, sampler=sampler)
    world = ReviewsWorld(config.world)
    for step in range(2):
        before = sum(float(p.detach().sum()) for p in state.policy.lm.parameters())
        _, metrics = ppo_iteration(state, world.prompts(config.ppo.batch_size, step), 0, step)
        assert len(sampler.pushes) == step + 1  # one push, after the update: the weights it was given moved
        assert sampler.pushes[-1] != before
        # the native sampler is the trainer: every weight 1 up to float noise, none cut
        assert metrics["correction/weight_mean"] == pytest.approx(1.0, abs=1e-4)
        assert metrics["correction/changed_frac"] == 0.0
        assert "mismatch/kl" not in metrics  # logged only where the sampler is not the trainer


def test_the_doctors_fix_for_a_mismatch_is_a_correction_in_rlhflabs_keys():
    """rlhflab's vocabulary turns the correction on as a mode (a key that takes no `true`),
    verify reruns stage 3 only for it, and a run that already corrects gets no such fix."""
    from rlhflab.doctor import RLHFLAB_DIALECT, Change, RunSettings, render_change
    from rlhflab.doctor.causes import sampler_mismatch
    from rlhflab.doctor.formats.rlhflab import settings_from_config
    from rlhflab.verify import first_stage_to_rerun

    vocabulary = RLHFLAB_DIALECT.vocabulary
    change = render_change(vocabulary, Change("importance_sampling_correction", "set", True))
    assert change == "rollout.correction=token_truncate"
    key, value = change.split("=")
    assert load_config("smoke", overrides=[change]).rollout.correction == value
    assert first_stage_to_rerun({key: value}) == "ppo"
    assert settings_from_config({"rollout": {"correction": "none"}})["importance_sampling_correction"] is False
    assert settings_from_config({"rollout": {"correction": "sequence_mask"}})["importance_sampling_correction"] is True

    on, off = (SimpleNamespace(settings=RunSettings(importance_sampling_correction=v)) for v in (True, False))
    assert sampler_mismatch(off).fix is not None
    assert sampler_mismatch(on).fix is None


class RefusingSampler:
    """A rollout sampler that must not be used."""

    is_trainer = True

    def __call__(self, *args):
        raise AssertionError("the evaluation sampled with the rollout's sampler")

    def push(self, lm) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_evaluation_samples_the_trained_weights_not_the_rollout_sampler(smoke_run):
    """Whatever samples the rollouts, the held-out evaluation samples the policy itself: a
    weight sync that did not take cannot hide in eval.json."""
    from rlhflab.ppo.evaluation import evaluate_policy
    from rlhflab.ppo.state import load_ppo_state
    from rlhflab.seeding import RowStreams
    from rlhflab.worlds.reviews import ReviewsWorld

    config = load_config("smoke")
    state = replace(load_ppo_state(config, smoke_run, PPOComponents()), sampler=RefusingSampler())
    world = ReviewsWorld(config.world)
    prompts = world.prompts(8, 5)
    result = evaluate_policy(state, world, prompts, 8, 1.0, RowStreams(0, ("eval",), list(range(8))))
    assert math.isfinite(result["gold_mean"]) and result["length_mean"] > 0


def test_the_engine_refuses_a_run_that_replaces_the_sample_component(tmp_path):
    """vLLM samples in the sample component's place: a fault there would silently vanish."""
    from rlhflab.faults.zoo import FAULTS

    fault = next(f for f in FAULTS if "sample" in f.code)
    components = fault.components()
    with pytest.raises(ConfigError, match="samples in place of the sample component"):
        start_sampler(components.sample, tmp_path, RolloutConfig(engine="vllm"), 0, torch.device("cpu"))


def test_a_correction_of_weight_w_is_the_update_on_w_times_the_advantages(smoke_run):
    """ppo_update with every importance weight 2 makes, bitwise, the update of doubled
    advantages without a correction (the weight reaches the loss through the advantage)."""
    import copy

    from rlhflab.ppo.correction import Correction
    from rlhflab.ppo.rollout import make_rollout
    from rlhflab.ppo.state import load_ppo_state
    from rlhflab.ppo.trainer import compute_advantages, ppo_update
    from rlhflab.seeding import torch_generator
    from rlhflab.worlds.reviews import ReviewsWorld

    config = load_config("smoke")
    state = load_ppo_state(config, smoke_run, PPOComponents())
    rollout, _ = make_rollout(state, ReviewsWorld(config.world).prompts(config.ppo.batch_size, 3),
                              torch_generator(0, "w"))
    adv = compute_advantages(state, rollout)
    start = (copy.deepcopy(state.policy.state_dict()), copy.deepcopy(state.optimizer.state_dict()))

    def update(advantages, correction):
        state.policy.load_state_dict(start[0])
        state.optimizer.load_state_dict(start[1])
        metrics = ppo_update(state, rollout, replace(adv, advantages=advantages), torch_generator(0, "u"), correction)
        return metrics, [p.detach().clone() for p in state.policy.parameters()]

    twice = Correction(torch.full_like(adv.advantages, 2.0), 0.0)
    weighted, weighted_params = update(adv.advantages, twice)
    doubled, doubled_params = update(adv.advantages * 2.0, None)
    plain, plain_params = update(adv.advantages, None)
    assert weighted == doubled
    assert all(torch.equal(a, b) for a, b in zip(weighted_params, doubled_params))
    assert weighted["policy/loss"] != plain["policy/loss"]

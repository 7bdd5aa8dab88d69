"""The update's schedule, optimiser step and entropy, the KL controller's signal and the reward
model's training are components: the defaults do what the stages did inline, and the stages use
whatever replaces them."""

import dataclasses
import inspect
import typing

import torch

from rlhflab.config import load_config
from rlhflab.data.batching import join_prompt_response
from rlhflab.models.bradley_terry import bt_loss, pair_scores
from rlhflab.models.optim import warmup_linear_decay
from rlhflab.ppo.components import PPOComponents, gradient_step, kl_to_reference, shuffled_minibatches
from rlhflab.ppo.state import load_ppo_state
from rlhflab.ppo.trainer import ppo_iteration
from rlhflab.stages.reward import run_reward
from rlhflab.worlds.reviews import ReviewsWorld


def test_every_epoch_visits_every_sample_once_in_a_new_order():
    schedule = shuffled_minibatches(12, 3, 2, torch.Generator().manual_seed(0))
    assert len(schedule) == 6 and all(len(mb) == 4 for mb in schedule)
    epochs = [torch.cat(schedule[:3]), torch.cat(schedule[3:])]
    assert all(sorted(e.tolist()) == list(range(12)) for e in epochs)
    assert epochs[0].tolist() != epochs[1].tolist()
    # the draws of the loop it replaced: one randperm per epoch from the same generator
    g = torch.Generator().manual_seed(0)
    assert [torch.randperm(12, generator=g).tolist() for _ in range(2)] == [e.tolist() for e in epochs]


def test_the_trainer_follows_the_replaced_schedule_and_tells_the_controller_the_replaced_signal(smoke_run):
    config = load_config("smoke", overrides=["ppo.kl_target=6"])
    seen, told = [], []

    def schedule(batch, minibatches, epochs, generator):
        seen.append((batch, minibatches, epochs))
        return [torch.arange(batch)]  # one full-batch step

    def signal(metrics):
        told.append(metrics["kl/mean"])
        return 100.0  # far above the target: beta must rise

    components = dataclasses.replace(PPOComponents(), minibatch_schedule=schedule, kl_signal=signal)
    state = load_ppo_state(config, smoke_run, components)
    before = state.controller.value
    prompts = ReviewsWorld(config.world).prompts(config.ppo.batch_size, 3)
    _, metrics = ppo_iteration(state, prompts, 0, 0)
    assert seen == [(config.ppo.batch_size, config.ppo.minibatches, config.ppo.epochs)]
    assert told == [metrics["kl/mean"]] and state.controller.value > before
    assert kl_to_reference(metrics) == metrics["kl/mean"]


def test_each_optimiser_step_and_the_reported_entropy_are_the_components_the_trainer_is_given(smoke_run):
    config = load_config("smoke")
    steps, entropies = [], []

    def step(optimizer, parameters, loss, max_grad_norm):
        steps.append(max_grad_norm)
        return gradient_step(optimizer, parameters, loss, max_grad_norm)

    def entropy(logits, mask):
        entropies.append(mask.shape)
        return torch.tensor(7.0)

    components = dataclasses.replace(PPOComponents(), gradient_step=step, entropy=entropy)
    state = load_ppo_state(config, smoke_run, components)
    _, metrics = ppo_iteration(state, ReviewsWorld(config.world).prompts(config.ppo.batch_size, 3), 0, 0)
    assert steps == [config.ppo.max_grad_norm] * (config.ppo.minibatches * config.ppo.epochs)
    assert len(entropies) == len(steps) and metrics["policy/entropy"] == 7.0


def test_gradient_step_starts_from_zero_clips_and_skips_what_is_not_finite():
    weight = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    weight.grad = torch.tensor([100.0, 100.0])  # left from an earlier step: must not count
    norm = gradient_step(optimizer, [weight], (weight * torch.tensor([3.0, 4.0])).sum(), 1.0)
    assert float(norm) == 5.0  # the norm of (3, 4) alone, before clipping
    assert torch.allclose(weight.detach(), torch.tensor([1 - 0.6, 1 - 0.8]))  # one step along (3, 4) / 5
    before = weight.detach().clone()
    norm = gradient_step(optimizer, [weight], weight.sum() * float("nan"), 1.0)
    assert not torch.isfinite(norm) and torch.equal(weight.detach(), before)


def test_warmup_linear_decay_is_the_reward_stages_schedule():
    # by hand: 40 steps, 2 of warm-up, then down to 1/38 of the rate at the last step
    lrs = [warmup_linear_decay(1.0, step, 20, 2) for step in range(40)]
    assert lrs[:3] == [0.5, 1.0, 1.0] and abs(lrs[-1] - 1 / 38) < 1e-12
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))


def test_the_reward_stage_reads_its_rows_pairs_loss_and_rate_from_the_components(smoke_run, tmp_path):
    from rlhflab.models.reward_model import load_reward_model, reward_model_from_lm
    from rlhflab.pipeline import STAGE_NAMES
    from rlhflab.ppo.components import COMPONENT_STAGES
    from rlhflab.runs import RunDir
    from rlhflab.seeding import derive_seed
    from rlhflab.verify import first_stage_to_rerun, share_stages

    called = {"rows": 0, "pairs": 0, "loss": 0, "lr": []}

    def rows(*tensors):
        called["rows"] += 1
        return join_prompt_response(*tensors)

    def pairs(scores, index, first):
        called["pairs"] += 1
        return pair_scores(scores, index, first)

    def loss(chosen, rejected):
        called["loss"] += 1
        return bt_loss(chosen, rejected)

    def lr(base, step, steps_per_epoch, epochs):
        called["lr"].append(step)
        return 0.0  # no step moves the model

    config = load_config("smoke")
    run = RunDir(tmp_path / "run")
    run.create()
    share_stages(RunDir(smoke_run.root), run, "reward")
    components = dataclasses.replace(PPOComponents(), comparison_rows=rows, preference_pairs=pairs,
                                     preference_loss=loss, reward_lr=lr)
    run_reward(config, run, show_progress=False, components=components)
    steps = len(called["lr"])
    assert called["rows"] > 0 and called["pairs"] == called["loss"] == steps > 0
    assert called["lr"] == list(range(steps))
    # at rate 0 the saved model is the one stage 2 started from
    torch.manual_seed(derive_seed(config.seed, "rm-init"))
    start = reward_model_from_lm(run.stage1_lm).state_dict()
    saved = load_reward_model(run.stage2_rm).state_dict()
    assert all(torch.equal(start[name], saved[name]) for name in start)
    # a swap of a stage-2 component reruns stage 2; of a PPO component, stage 3
    assert {COMPONENT_STAGES[name] for name in ("comparison_rows", "preference_pairs", "preference_loss",
                                                 "reward_lr")} == {"reward"}
    assert first_stage_to_rerun({"components.preference_loss": "x:y"}) == "reward"
    assert first_stage_to_rerun({"components.gae": "x:y"}) == STAGE_NAMES[-1]


def _parameters(function) -> list[str]:
    target = function if inspect.isfunction(function) or inspect.ismethod(function) else function
    return [p.name for p in inspect.signature(target).parameters.values() if p.name != "self"]


def test_every_component_has_a_protocol_its_default_and_every_fault_follow():
    """Each `PPOComponents` field is typed by a Protocol of ppo/seams.py whose parameters
    the default and every fault's replacement take, by name and in order."""
    from dataclasses import fields

    from rlhflab.faults.zoo import FAULTS
    from rlhflab.ppo import seams

    defaults = PPOComponents()
    for f in fields(PPOComponents):
        protocol = getattr(seams, str(f.type).removeprefix("seams."), None)
        assert protocol is not None and issubclass(protocol, typing.Protocol), f"{f.name}: {f.type} is no seam"
        expected = _parameters(protocol.__call__)
        assert _parameters(getattr(defaults, f.name)) == expected, f.name
        for fault in FAULTS:
            if f.name in fault.code:
                assert _parameters(fault.code[f.name]) == expected, (fault.name, f.name)

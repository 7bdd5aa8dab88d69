"""The update's schedule and the KL controller's signal are components: the defaults do
what the trainer did inline, and the trainer uses whatever replaces them."""

import dataclasses

import torch

from rlhflab.config import load_config
from rlhflab.ppo.components import PPOComponents, kl_to_reference, shuffled_minibatches
from rlhflab.ppo.trainer import load_ppo_state, ppo_iteration
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

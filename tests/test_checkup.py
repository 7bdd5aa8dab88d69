"""The checkup's probes pass on the healthy pipeline and fail on what they are meant to catch."""

import dataclasses
import json

import pytest
import torch

from rlhflab.checkup import ProbeContext, probes, run_checkup
from rlhflab.config import load_config
from rlhflab.doctor.causes import CheckupVerdict, rank_causes
from rlhflab.doctor.rules import BY_NAME
from rlhflab.doctor.table import MetricTable
from rlhflab.faults.zoo import get_fault
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.trainer import load_ppo_state
from rlhflab.worlds.reviews import ReviewsWorld


def context(run, components=PPOComponents()):
    config = load_config("smoke")
    state = load_ppo_state(config, run, components)
    world = ReviewsWorld(config.world)
    return ProbeContext(config, state, world, world.prompts(config.ppo.batch_size, 7), world)


def test_every_probe_passes_on_the_healthy_pipeline(smoke_run):
    results = run_checkup(load_config("smoke"), smoke_run)
    failed = {r.name: (r.measured, r.tolerance) for r in results if not r.passed}
    # The smoke reward model is small; its health probes are checked on the demo in bench.
    failed.pop("rm_prefers_chosen", None)
    failed.pop("rm_score_not_mostly_length", None)
    assert failed == {}
    saved = json.loads((smoke_run.root / "checkup.json").read_text())
    assert {p["name"] for p in saved["probes"]} == {r.name for r in results}
    (smoke_run.root / "checkup.json").unlink()  # leave the shared run as it was


def test_gae_probe_fails_on_a_reversed_gae(smoke_run):
    result = probes.probe_gae_matches_naive_loop(context(smoke_run, get_fault("gae_reversed").components()))
    assert not result.passed and result.component == "advantages_values"


def test_reference_probe_fails_when_the_reference_is_the_policy(smoke_run):
    ctx = context(smoke_run)
    ctx.state = dataclasses.replace(ctx.state, reference=ctx.state.policy.lm)
    result = probes.probe_reference_frozen(ctx)
    assert not result.passed and result.measured > 0


def test_kl_and_ratio_probes_fail_when_the_policy_differs_from_its_reference(smoke_run):
    ctx = context(smoke_run)
    with torch.no_grad():
        for p in ctx.state.policy.lm.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert not probes.probe_kl_zero_before_update(ctx).passed
    assert probes.probe_first_ratio_is_one(ctx).passed  # old and new are the same policy: still 1


# Each probe and the faults it is meant to catch.
CATCHES = [
    ("ref_is_policy", probes.probe_reference_frozen),
    ("logprob_off_by_one", probes.probe_sampled_logprobs_match),
    ("temperature_mismatch", probes.probe_sampled_logprobs_match),
    ("dropout_in_rollout", probes.probe_first_ratio_is_one),
    ("no_response_mask", probes.probe_mask_covers_response),
    ("rm_reads_pad", probes.probe_reward_padding_invariance),
    ("gae_reversed", probes.probe_gae_matches_naive_loop),
    ("reward_scale_100x", probes.probe_reward_normalised),
    ("missing_eos_penalty_off_and_no_eos", probes.probe_sampled_logprobs_match),
    ("missing_eos_penalty_off_and_no_eos", probes.probe_responses_end),
    ("narrow_prompts", probes.probe_prompts_distinct),
]


@pytest.mark.parametrize("fault_name, probe", CATCHES, ids=[f"{f}-{p.__name__}" for f, p in CATCHES])
def test_probe_fails_on_the_fault_it_is_meant_to_catch(smoke_run, fault_name, probe):
    assert probe(context(smoke_run)).passed, "the probe must pass without the fault"
    result = probe(context(smoke_run, get_fault(fault_name).components()))
    assert not result.passed, (fault_name, result)


def test_the_most_specific_failed_probe_ranks_first():
    table = MetricTable.from_records([{"step": i, "kl/mean": 0.0} for i in range(10)])
    failed = {"rm_score_not_mostly_length": "reward_model", "mask_covers_response_through_eos": "advantages_values",
              "first_ratio_is_one": "logprob_bookkeeping"}
    rule = BY_NAME["ratio_off"]
    assert rank_causes(rule.causes, rule.clues, table, CheckupVerdict(failed))[0].component == "advantages_values"


FORWARD_PROBES = (probes.probe_kl_zero_before_update, probes.probe_first_ratio_is_one,
                  probes.probe_sampled_logprobs_match, probes.probe_logprob_padding_invariance,
                  probes.probe_reward_padding_invariance)


def test_forward_probes_hold_under_bf16_autocast_and_still_catch_their_faults(smoke_run, monkeypatch):
    # bf16 forwards (CUDA's autocast, exercised on the CPU): a healthy run passes with the
    # bf16 tolerances, and the faults these probes catch still fail them.
    import rlhflab.models.precision as precision

    monkeypatch.setattr(precision, "BF16_DEVICES", ("cpu", "cuda"))
    healthy = context(smoke_run)
    for probe in FORWARD_PROBES:
        result = probe(healthy)
        assert result.passed and result.tolerance.endswith("(bfloat16)"), result
    for fault_name, probe in (("temperature_mismatch", probes.probe_sampled_logprobs_match),
                              ("logprob_off_by_one", probes.probe_sampled_logprobs_match),
                              ("dropout_in_rollout", probes.probe_first_ratio_is_one),
                              ("rm_reads_pad", probes.probe_reward_padding_invariance)):
        assert not probe(context(smoke_run, get_fault(fault_name).components())).passed, fault_name

"""The checkup's component graph: each probe declares the components whose output it reads;
when a probe fails and a component it reads has a failing probe of its own, the doctor ranks
that upstream component first and shows the downstream failure as its possible consequence,
while a downstream failure alone stays first."""

import dataclasses
import json

import torch

from rlhflab.checkup.probes import PROBES, run_probes
from rlhflab.doctor.causes import CheckupVerdict, rank_causes
from rlhflab.doctor.diagnose import checkup_findings
from rlhflab.doctor.table import MetricTable

TABLE = MetricTable.from_records([{"step": i, "kl/mean": 0.0} for i in range(10)])
READS = {p.name: p.reads for p in PROBES}

# A downstream probe that fails with a weak reward model (its spread is the reward model's
# scores of the policy's samples), more specific than the reward model's own health probe.
NORMALISED = {"name": "rewards_standardised", "component": "reward_scaling", "passed": False, "specificity": 1,
              "reads": list(READS["reward_normalised"])}
RM_HEALTH = {"name": "rm_prefers_chosen", "component": "reward_model", "passed": False, "specificity": 0,
             "reads": list(READS["reward_model_health"])}


def first(records: list[dict]) -> str:
    return rank_causes((), (), TABLE, CheckupVerdict.from_probes(records))[0].component


def test_the_registry_says_what_each_probe_reads_and_never_its_own_component():
    assert "reward_model" in READS["reward_normalised"]
    assert "reward_model" in READS["scores_standardised_with_the_models_statistics"]
    assert all(isinstance(c, str) for reads in READS.values() for c in reads)


def test_the_upstream_failure_ranks_first_over_a_more_specific_downstream_one():
    # by specificity alone the downstream probe (1) would outrank the reward model's (0)
    assert first([{**NORMALISED, "reads": []}, RM_HEALTH]) == "reward_scaling"
    for order in ([NORMALISED, RM_HEALTH], [RM_HEALTH, NORMALISED]):
        assert first(order) == "reward_model"
    verdict = CheckupVerdict.from_probes([NORMALISED, RM_HEALTH])
    causes = rank_causes((), (), TABLE, verdict)
    assert [c.component for c in causes] == ["reward_model", "reward_scaling"]
    assert "may follow from reward_model" in causes[1].explanation
    evidence = {e.metric: e.threshold for e in checkup_findings(TABLE, verdict)[0].evidence}
    assert "may follow from reward_model" in evidence["checkup/rewards_standardised"]
    assert "may follow" not in evidence["checkup/rm_prefers_chosen"]


def test_a_downstream_failure_alone_stays_first():
    assert first([NORMALISED]) == "reward_scaling"
    # a read component that passed explains nothing
    passed = {**RM_HEALTH, "passed": True}
    assert first([NORMALISED, passed]) == "reward_scaling"
    assert CheckupVerdict.from_probes([NORMALISED, passed]).upstream("rewards_standardised") == []


def test_along_a_chain_the_most_upstream_failing_component_ranks_first():
    records = [{"name": "c", "component": "advantages_values", "passed": False, "specificity": 3,
                "reads": ["reward_scaling"]},
               {"name": "b", "component": "reward_scaling", "passed": False, "specificity": 3,
                "reads": ["reward_model"]},
               {"name": "a", "component": "reward_model", "passed": False, "specificity": 0, "reads": []}]
    for order in (records, records[::-1]):
        assert first(order) == "reward_model"


def score_one_token_early(model, input_ids, attention_mask):
    """A reward model read at the token before the last real one."""
    from rlhflab.models.forward import padded_forward

    hidden = padded_forward(model.base_model, input_ids, attention_mask).last_hidden_state.float()
    last = torch.where(attention_mask, torch.arange(attention_mask.shape[1]), -1).max(1).values
    return model.score(hidden[torch.arange(len(last)), (last - 1).clamp_min(0)]).squeeze(-1)


def scores_standardised_by_the_batch(raw, mean, std, normalize):
    """Standardised with the batch's own statistics, not the reward model's."""
    return (raw - raw.mean()) / raw.std()


def test_two_broken_components_through_the_real_checkup_rank_the_upstream_one_first(smoke_run, tmp_path):
    from rlhflab.checkup.context import ProbeContext
    from rlhflab.config import load_config
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.ppo.state import load_ppo_state
    from rlhflab.worlds.reviews import ReviewsWorld

    config = load_config("smoke")
    components = dataclasses.replace(PPOComponents(), score=score_one_token_early,
                                     reward_transform=scores_standardised_by_the_batch)
    state = load_ppo_state(config, smoke_run, components)
    world = ReviewsWorld(config.world)
    ctx = ProbeContext(config, state, world, world.prompts(config.ppo.batch_size, 7), world,
                       starting_model=smoke_run.stage1_lm)
    run_probes(ctx, tmp_path)
    records = json.loads((tmp_path / "checkup.json").read_text())["probes"]
    failed = {r["name"]: r["component"] for r in records if not r["passed"]}
    assert "reward_read_at_the_last_token" in failed and "scores_standardised_with_the_models_statistics" in failed
    verdict = CheckupVerdict.from_probes(records)
    assert verdict.upstream("scores_standardised_with_the_models_statistics") == ["reward_model"]
    assert rank_causes((), (), TABLE, verdict)[0].component == "reward_model"
    # without the reward model's failures, the scaling one is first
    assert first([r for r in records if r["component"] != "reward_model"]) == "reward_scaling"

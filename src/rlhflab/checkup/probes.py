"""The checkup: probes of what must hold in any correct PPO-RLHF implementation, run on the
configured pipeline's own components (a fault's replacement is what gets probed), end to
end through one real iteration. Each probe measures one number against a tolerance and
clears or blames one component; the doctor ranks that component first for the findings
of the same run (RUN/checkup.json).

The registry says of each probe how specific a failure is (a weak reward model fails its
health probes whatever else is wrong; a failed mask or GAE probe points at one function),
whether passing it, with the other conclusive probes of its component, clears that
component, and whether it needs rlhflab's own trainer (probes of the update's code do not
apply to models checked for another trainer).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from rlhflab.checkup import credit, data, gradients, kl, logprobs, masks, reward, update
from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, ProbeSkipped
from rlhflab.checkup.settings import SettingReport, check_settings
from rlhflab.config import PipelineConfig
from rlhflab.distributed import default_device
from rlhflab.doctor.findings import Component
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.trainer import load_ppo_state
from rlhflab.runs import RunDir, write_json
from rlhflab.seeding import derive_seed
from rlhflab.sources import context_length, policy_dir, preference_data, prompt_task


@dataclass(frozen=True)
class Probe:
    run: Callable[[ProbeContext], ProbeResult | list[ProbeResult]]
    specificity: int  # 0: fails with many bugs ... 3: points at one function
    clears: Component | None = None  # the component cleared when all probes that clear it ran and passed
    needs_trainer: bool = False  # tests rlhflab's PPO code rather than the models

    @property
    def name(self) -> str:
        return self.run.__name__.removeprefix("probe_")


PROBES: tuple[Probe, ...] = (
    # logprob bookkeeping and the reference
    Probe(logprobs.probe_kl_zero_before_update, 2, clears="logprob_bookkeeping"),
    Probe(logprobs.probe_first_ratio_is_one, 2, clears="logprob_bookkeeping", needs_trainer=True),
    Probe(logprobs.probe_sampled_logprobs_match, 2, clears="logprob_bookkeeping"),
    Probe(logprobs.probe_logprob_padding_invariance, 3, clears="logprob_bookkeeping"),
    Probe(logprobs.probe_old_logprobs_are_the_rollouts, 3, needs_trainer=True),
    Probe(logprobs.probe_ratio_moves_after_first_step, 1, needs_trainer=True),
    Probe(logprobs.probe_reference_frozen, 3),
    Probe(logprobs.probe_reference_deterministic, 3),
    # KL control
    Probe(kl.probe_kl_penalty_lowers_the_reward, 3, needs_trainer=True),
    Probe(kl.probe_kl_controller_moves_toward_target, 3, needs_trainer=True),
    # gradients
    Probe(gradients.probe_losses_differentiate_current_outputs_only, 3, needs_trainer=True),
    Probe(gradients.probe_kl_penalty_reaches_no_parameter, 3, needs_trainer=True),
    Probe(gradients.probe_value_loss_moves_values_toward_returns, 3, needs_trainer=True),
    Probe(gradients.probe_value_loss_zero_at_returns, 3, needs_trainer=True),
    Probe(gradients.probe_clip_bounds_the_update, 3, needs_trainer=True),
    # credit
    Probe(credit.probe_score_at_last_token, 3, needs_trainer=True),
    Probe(credit.probe_score_moves_own_advantages_only, 3, needs_trainer=True),
    Probe(credit.probe_gae_matches_naive_loop, 3, needs_trainer=True),
    Probe(credit.probe_every_token_gets_credit, 2, needs_trainer=True),
    # masks
    Probe(masks.probe_statistics_ignore_padding, 3, needs_trainer=True),
    Probe(masks.probe_mask_covers_response, 3),
    # the update's direction: many bugs reverse it, so it says least about which
    Probe(update.probe_one_update_moves_the_right_way, 1, needs_trainer=True),
    # reward model and scaling
    Probe(reward.probe_reward_model_health, 0),
    Probe(reward.probe_reward_padding_invariance, 3),
    Probe(reward.probe_reward_padding_side_invariance, 3),
    Probe(reward.probe_reward_normalised, 1, clears="reward_scaling", needs_trainer=True),
    # sampling and prompts
    Probe(data.probe_responses_end, 3, clears="sampling"),
    Probe(data.probe_prompts_distinct, 3, clears="prompt_data"),
)


@dataclass(frozen=True)
class Checkup:
    """What a checkup found: each probe's result, the probes that could not run and why,
    the components cleared (every probe that clears them ran and passed), and the settings
    checked against the literature's ranges."""

    results: list[ProbeResult]
    skipped: dict[str, str]
    cleared: list[str]
    settings: list[SettingReport]

    @property
    def warnings(self) -> list[SettingReport]:
        return [s for s in self.settings if not s.ok]


def run_probes(ctx: ProbeContext, out_dir: Path) -> Checkup:
    """Every probe on `ctx` that applies; writes out_dir/checkup.json with the results (each
    with its specificity and the component it clears), the components cleared, the probes
    that could not run and why, and the settings' warnings."""
    results: list[ProbeResult] = []
    records: list[dict] = []
    skipped: dict[str, str] = {}
    unclear: set[str] = set()  # components with a clearing probe that failed or did not run
    for probe in PROBES:
        try:
            if probe.needs_trainer and not ctx.trainer:
                raise ProbeSkipped("tests rlhflab's own PPO trainer, not models trained by another")
            out = probe.run(ctx)
        except ProbeSkipped as why:
            skipped[probe.name] = str(why)
            unclear |= {probe.clears} if probe.clears else set()
            continue
        for result in out if isinstance(out, list) else [out]:
            results.append(result)
            records.append(asdict(result) | {"specificity": probe.specificity, "clears": probe.clears})
            if not result.passed and probe.clears:
                unclear.add(probe.clears)
    cleared = sorted({probe.clears for probe in PROBES if probe.clears} - unclear)
    checkup = Checkup(results, skipped, cleared, check_settings(ctx.config.ppo))
    write_json(Path(out_dir) / "checkup.json", {"probes": records, "cleared": cleared, "skipped": skipped,
                                                "settings": [asdict(s) for s in checkup.settings]})
    return checkup


def run_checkup(config: PipelineConfig, run: RunDir, components: PPOComponents = PPOComponents(),
                trainer: bool = True) -> Checkup:
    """Every probe on a run's models (its stages, or the user's `data.policy` and
    `data.reward_model`) and prompts; writes RUN/checkup.json. The reward model is tested
    on the held-out share of `data.preferences`, or on fresh labelled world samples.
    `trainer=False` checks models for another trainer: the probes of rlhflab's PPO code
    are listed as not run."""
    state = load_ppo_state(config, run, components, default_device())
    context = context_length(policy_dir(config, run), config)
    task = prompt_task(config, state.tokenizer, context)
    prompts = task.train.prompts(config.ppo.batch_size, derive_seed(config.seed, "checkup-prompts"))
    pairs = tuple(preference_data(config, state.tokenizer, context)[1]) if config.data.preferences else ()
    return run_probes(ProbeContext(config, state, task.train, prompts, task.world, pairs, trainer), run.root)

"""The checkup: probes of what must hold in any correct PPO-RLHF implementation, run on the
configured pipeline's own components (a fault's replacement is what gets probed), end to
end through real iterations, in two states (`states.py`): the start, where the policy, the
rollout's old policy and the reference are one model, and a moved state where they differ.
Each probe measures one number against a tolerance and clears or blames one component;
the doctor ranks that component first for the findings of the same run (RUN/checkup.json).

The registry says of each probe how specific a failure is (a weak reward model fails its
health probes whatever else is wrong; a failed mask or GAE probe points at one function),
the states it runs in, what it can and cannot see, whether it needs rlhflab's own trainer
(probes of the update's code do not apply to models checked for another trainer), and
the component its passing clears, with the states a pass clears from, and the components
whose output it reads (the component graph: a failure upstream explains one here). A probe whose
invariant relates the policy, the old policy and the reference holds trivially at the
start, so it clears only from the moved state: a component is cleared when every probe
that clears it ran in its clearing states and passed in every state it ran in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from rlhflab.checkup import around, credit, data, gradients, kl, logprobs, masks, optimizer, preferences, reward, update
from rlhflab.checkup.context import ProbeContext
from rlhflab.checkup.results import ProbeResult, ProbeSkipped
from rlhflab.checkup.settings import SettingReport, check_settings
from rlhflab.checkup.states import START, StateName, moved_state
from rlhflab.config import PipelineConfig
from rlhflab.distributed import default_device
from rlhflab.doctor import Component
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.state import load_ppo_state
from rlhflab.runs import RunDir, write_json
from rlhflab.seeding import derive_seed
from rlhflab.sources import context_length, policy_dir, preference_data, prompt_task

BOTH: tuple[StateName, ...] = ("start", "moved")
MOVED: tuple[StateName, ...] = ("moved",)
# What no probe that runs at the start can see: there the three policies are one model.
SWAPS = "at the start, a bug that uses the policy, the old policy or the reference in place of another"


@dataclass(frozen=True)
class Probe:
    run: Callable[[ProbeContext], ProbeResult | list[ProbeResult]]
    specificity: int  # 0: fails with many bugs ... 3: points at one function
    sees: str  # the kinds of fault a failure shows
    blind: str  # what it cannot see, in the states it runs in
    clears: tuple[Component, ...] = ()  # the components cleared when all probes that clear them ran and passed
    needs_trainer: bool = False  # tests rlhflab's PPO code rather than the models
    states: tuple[StateName, ...] = ("start",)
    clears_in: tuple[StateName, ...] = ()  # the states whose pass may clear `clears`
    relates_policies: bool = False  # its invariant relates policy, old policy and reference: trivial at the start
    # The component graph: the components whose output the probe consumes (not the one it
    # tests). A failure of one of them can fail this probe too, so when both fail the doctor
    # ranks the upstream component first and shows this failure as its consequence.
    reads: tuple[Component, ...] = ()

    @property
    def name(self) -> str:
        return self.run.__name__.removeprefix("probe_")


PROBES: tuple[Probe, ...] = (
    # logprob bookkeeping and the reference
    Probe(logprobs.probe_kl_zero_before_update, 2,
          "a training forward that differs between two copies of one model (temperature, dropout, a shift)",
          "everything once the policy has moved (it means something only at the start); " + SWAPS,
          relates_policies=True,
          reads=("kl_control",)),
    Probe(logprobs.probe_first_ratio_is_one, 2,
          "old logprobs that are not the policy's own on the first minibatch: dropout, a training forward "
          "unlike the rollout's; in the moved state also old logprobs of another model or an earlier step",
          SWAPS, clears=("logprob_bookkeeping",), needs_trainer=True, states=BOTH, clears_in=MOVED,
          relates_policies=True),
    Probe(logprobs.probe_sampled_logprobs_match, 2,
          "a training forward unlike the sampler's (temperature, top-k, an off-by-one, positions); a token written "
          "into a response after it was sampled (blamed on sampling when only last tokens differ)",
          "a sampler and a training forward wrong in the same way; " + SWAPS,
          clears=("logprob_bookkeeping", "sampling"), states=BOTH, clears_in=MOVED, relates_policies=True),
    Probe(logprobs.probe_logprob_padding_invariance, 3, "logprobs that depend on padding (positions, masks)",
          "anything that does not depend on how a sequence is batched", clears=("logprob_bookkeeping",),
          clears_in=("start",)),
    Probe(logprobs.probe_old_logprobs_are_the_rollouts, 3,
          "old logprobs given to the loss that are no row of the rollout (recomputed after a step, mixed rows)",
          "at the start, old logprobs recomputed from the unchanged model: they equal the rollout's",
          needs_trainer=True, states=BOTH, relates_policies=True),
    Probe(logprobs.probe_ratio_moves_after_first_step, 1, "an update that moves nothing (a zero step, a detached loss)",
          "how far or which way the policy moves", needs_trainer=True,
          reads=("advantages_values", "reward_scaling", "logprob_bookkeeping")),
    Probe(logprobs.probe_reference_frozen, 3, "a reference that shares tensors with the policy or requires grad",
          "a reference that follows the policy without sharing its tensors"),
    Probe(logprobs.probe_reference_deterministic, 3, "a reference with dropout or sampling in its forward",
          "a reference that is deterministic but the wrong model"),
    Probe(logprobs.probe_reference_is_the_starting_model, 3,
          "reference logprobs in the rollout that are not the starting model's: a reference that follows the "
          "policy, another checkpoint", "nothing of the policy's own logprobs", states=MOVED, relates_policies=True),
    # KL control
    Probe(kl.probe_kl_penalty_lowers_the_reward, 3, "a penalty of the wrong sign, or none", "the penalty's size",
          needs_trainer=True,
          reads=("logprob_bookkeeping",)),
    Probe(kl.probe_kl_penalty_is_beta_times_the_kl, 3,
          "a per-token penalty that is not beta x the KL estimate to the starting model: N x the KL, beta applied "
          "twice, a sequence's KL on each of its tokens, the KL to another model",
          "a controller that sets beta wrong (the controller probe and the settings see that)",
          needs_trainer=True, states=MOVED, relates_policies=True,
          reads=("logprob_bookkeeping",)),
    Probe(kl.probe_kl_controller_moves_toward_target, 3, "an adaptive controller that moves beta the wrong way",
          "how far it moves beta", needs_trainer=True),
    # gradients
    Probe(gradients.probe_losses_differentiate_current_outputs_only, 3,
          "losses that send gradients into their targets (advantages, returns, old logprobs or values)",
          "a wrong target value", needs_trainer=True),
    Probe(gradients.probe_kl_penalty_reaches_no_parameter, 3, "a KL penalty with a gradient path into the policy",
          "the penalty's value", needs_trainer=True),
    Probe(gradients.probe_value_loss_moves_values_toward_returns, 3, "a value loss that pushes values away from "
          "the returns, or never reaches the value head", "targets that are not the returns but move the same way",
          needs_trainer=True),
    Probe(gradients.probe_value_loss_zero_at_returns, 3, "a value loss whose targets are not the returns",
          "how the returns were computed", needs_trainer=True),
    Probe(gradients.probe_clip_bounds_the_update, 3, "a clipped objective that does not clip past the range",
          "the clip range's value (the settings check it)", needs_trainer=True),
    # credit
    Probe(credit.probe_score_at_last_token, 3, "the score placed anywhere but the last real token",
          "the KL part of the reward", needs_trainer=True),
    Probe(credit.probe_score_moves_own_advantages_only, 3, "advantages that mix rows (before whitening)",
          "rows mixed later, in the update's minibatches", needs_trainer=True),
    Probe(credit.probe_gae_matches_naive_loop, 3, "a GAE that differs from the recursion of Schulman et al. 2016",
          "the values GAE is given", needs_trainer=True),
    Probe(credit.probe_every_token_gets_credit, 2, "a gamma x lam that starves early tokens of credit",
          "credit of the right size but wrong sign", needs_trainer=True),
    Probe(credit.probe_every_epoch_visits_every_sample_once, 3,
          "a minibatch schedule that repeats or skips samples within an epoch (every epoch on one minibatch first)",
          "the order of the minibatches within an epoch", needs_trainer=True),
    Probe(credit.probe_advantages_follow_their_samples, 3,
          "advantages or returns given to the losses that belong to other samples (shuffled apart from their rows)",
          "a swap between rows whose old logprobs and values are the same", needs_trainer=True, states=BOTH,
          reads=("ppo_hyperparameters",)),
    # masks
    Probe(masks.probe_statistics_ignore_padding, 3, "a statistic of the update that reads padding",
          "a mask that covers the wrong real tokens", needs_trainer=True),
    Probe(masks.probe_mask_covers_response, 3, "a loss mask that is not the response through its first EOS",
          "statistics that ignore the mask"),
    Probe(masks.probe_entropy_of_known_distributions, 3,
          "a reported entropy that is not the mean over real tokens of each position's entropy: padding counted "
          "(as 0 or as a sentinel), a sum, another base", "the logits the update feeds it", needs_trainer=True),
    # the update's direction and the optimiser: many bugs reverse the first, so it says least about which
    Probe(update.probe_one_update_moves_the_right_way, 1, "an update that lowers the best response's logprob",
          "which component reversed it", needs_trainer=True,
          reads=("advantages_values", "reward_scaling", "reward_model", "kl_control", "logprob_bookkeeping")),
    Probe(optimizer.probe_gradient_step_applies_this_steps_gradient, 3,
          "an optimiser step that keeps gradients from earlier steps, clips after stepping or not at all, or steps on a "
          "NaN", "the optimiser's own update rule (Adam's moments: the next probe)", needs_trainer=True),
    Probe(optimizer.probe_optimizer_state_carried, 2,
          "trainable parameters outside the optimiser; Adam moments reset or lost between iterations",
          "at the start there are no moments yet; a wrong learning rate", needs_trainer=True, states=MOVED),
    # reward model and scaling
    Probe(reward.probe_reward_model_health, 0, "a reward model that misranks held-out pairs or scores mostly length",
          "how the trainer reads it",
          reads=("sampling", "stage1")),  # stage 2 learns from stage 1's samples
    Probe(reward.probe_reward_read_at_the_last_token, 3,
          "a score read anywhere but the response's last token: at padding, one token early (before EOS), in the "
          "prompt", "a reward model trained to read another position (the probe holds the trainer to the last token, "
          "where stage 2 and sequence classifiers read)"),
    Probe(reward.probe_reward_padding_invariance, 3, "a reward read at padding or changed by batching",
          "a reward read at the wrong real token"),
    Probe(reward.probe_reward_padding_side_invariance, 3, "a reward that depends on the padding side",
          "a reward read at the wrong real token"),
    Probe(reward.probe_scores_standardised_with_the_models_statistics, 3,
          "a score transform that is not (raw - stored mean) / stored std: default or batch statistics, a clip",
          "statistics stored wrong in stage 2 (the spread probe sees those)", needs_trainer=True,
          clears=("reward_scaling",), clears_in=("start",),
          reads=("reward_model",)),
    Probe(reward.probe_reward_normalised, 1, "scores not standardised to unit spread", "a standardisation that "
          "keeps the spread but not the order", clears=("reward_scaling",), needs_trainer=True, clears_in=("start",),
          reads=("reward_model", "sampling")),
    # the reward model's training step (stage 2)
    Probe(preferences.probe_reward_model_learns_from_the_rows_it_scores, 3,
          "comparison rows unlike the rows stage 3 scores: the prompt left out, another template or padding",
          "rows that differ only where the reward model does not look", needs_trainer=True),
    Probe(preferences.probe_preference_pairs_follow_the_labels, 3,
          "chosen and rejected scores swapped, taken from other responses or other prompts",
          "labels that were wrong before training (the health probes see their effect)", needs_trainer=True),
    Probe(preferences.probe_preference_loss_is_bradley_terry, 3,
          "a loss that is not -mean log sigmoid(chosen - rejected), a wrong gradient, an accuracy that counts ties",
          "a margin or label smoothing chosen on purpose (it fails as any other loss)", needs_trainer=True),
    Probe(preferences.probe_reward_step_trains_on_every_labelled_pair, 3,
          "a training step that reads the scores in the wrong order, leaves pairs out or steps on another loss",
          "the reward model's own forward (a known score stands in for it)", needs_trainer=True),
    Probe(preferences.probe_reward_lr_falls_to_its_end, 3,
          "a reward-model schedule that does not peak at the configured rate early or ends high (sized for other "
          "steps)", "the rate's value (the settings)", needs_trainer=True),
    # sampling and prompts
    Probe(logprobs.probe_cut_responses_keep_what_was_sampled, 3,
          "a token written into a response cut at the length limit after it was sampled (an EOS forced onto it)",
          "a sampler and a training forward wrong in the same way (the sampled-logprobs probe's blind spot)",
          clears=("sampling",), clears_in=("start",), reads=("logprob_bookkeeping",)),
    Probe(data.probe_responses_end, 3, "a sampler whose responses do not end (EOS unreachable, a length too short)",
          "a sampler that ends responses but samples the wrong distribution (the sampled-logprobs probe, which clears "
          "sampling with it, sees some of that)", clears=("sampling",),
          clears_in=("start",), reads=("stage1",)),  # a policy that never learnt to stop does not end
    Probe(data.probe_prompts_distinct, 3, "a first batch of repeated prompts", "prompts that are varied but wrong",
          clears=("prompt_data",), clears_in=("start",)),
    Probe(data.probe_prompts_begin_with_one_bos, 3, "prompts whose text already holds the BOS token the encoder adds",
          "other special tokens a template writes (legitimately, for chat models)", clears=("prompt_data",),
          clears_in=("start",)),
    Probe(around.probe_prompts_change_between_iterations, 3, "a loader that gives every iteration the same batch",
          "prompts that change but repeat over longer cycles", clears=("prompt_data",), clears_in=("start",)),
    Probe(around.probe_training_prompts_not_held_out, 3, "training prompts drawn from the held-out part of the "
          "world's prompt space", "the run's own prompt files (split when read)", clears=("prompt_data",),
          clears_in=("start",)),
    # the pipeline around the PPO step: stage 1, stage 2's loop, the held-out evaluation, the resume
    Probe(around.probe_stage1_loss_is_the_token_mean, 3, "a stage-1 objective without the EOS target, or a mean of "
          "per-text means", "stage 1's data and schedule (its own log's losses)", clears=("stage1",),
          needs_trainer=True, clears_in=("start",)),
    Probe(around.probe_reward_epochs_reshuffle, 3, "reward-model epochs in one order, or rows missed or repeated",
          "the order within a batch", needs_trainer=True),
    Probe(around.probe_held_out_comparisons_apart, 3, "a reward model held out on its own training comparisons",
          "the user's preference file (split when read)", needs_trainer=True),
    # The evaluation samples and scores through the rollout's components: a forward that is not
    # deterministic (dropout left on) makes its two paths differ too.
    Probe(around.probe_evaluation_scores_every_prompt, 3, "an evaluation that drops prompts or scores other responses",
          "the evaluation's gold (the world's, not a component)", clears=("evaluation",), needs_trainer=True,
          clears_in=("start",), reads=("logprob_bookkeeping", "sampling", "reward_model", "kl_control")),
    Probe(around.probe_resume_restores_what_was_saved, 3, "a resume that loses Adam's moments, the KL coefficient or "
          "the log's place", "a checkpoint's sharding over several processes (tests/test_resume.py)",
          clears=("checkpointing",), needs_trainer=True, clears_in=("start",)),
)


@dataclass(frozen=True)
class Checkup:
    """What a checkup found: each probe's result (with the state it ran in), the probes that
    could not run and why, the components cleared (every probe that clears them ran in its
    clearing states and passed everywhere), the settings checked against the literature's
    ranges, and the states probed, each with how it was reached."""

    results: list[ProbeResult]
    skipped: dict[str, str]
    cleared: list[str]
    settings: list[SettingReport]
    states: dict[str, str]

    @property
    def warnings(self) -> list[SettingReport]:
        return [s for s in self.settings if not s.ok]


def _run_in_state(ctx: ProbeContext, results: list[ProbeResult], records: list[dict], skipped: dict[str, str],
                  passed_in: dict[str, set[str]], failed: set[str]) -> None:
    """Every probe of `ctx.where`'s state that applies, into the given accumulators."""
    state = ctx.where.name
    for probe in PROBES:
        if state not in probe.states:
            continue
        key = probe.name if len(probe.states) == 1 else f"{probe.name} ({state})"
        try:
            if probe.needs_trainer and not ctx.trainer:
                raise ProbeSkipped("tests rlhflab's own PPO trainer, not models trained by another")
            out = probe.run(ctx)
        except ProbeSkipped as why:
            skipped[key] = str(why)
            continue
        out = [replace(r, state=state) for r in (out if isinstance(out, list) else [out])]
        for result in out:
            results.append(result)
            records.append(asdict(result) | {"specificity": probe.specificity, "clears": list(probe.clears),
                                             "clears_here": bool(probe.clears) and state in probe.clears_in,
                                             "reads": [c for c in probe.reads if c != result.component]})
        if all(r.passed for r in out):
            passed_in.setdefault(probe.name, set()).add(state)
        else:
            failed.add(probe.name)


def cleared_components(passed_in: dict[str, set[str]], failed: set[str]) -> list[str]:
    """Components every one of whose clearing probes passed in all its clearing states and
    failed in none."""
    clearing: dict[str, list[Probe]] = {}
    for probe in PROBES:
        for component in probe.clears:
            clearing.setdefault(component, []).append(probe)
    return sorted(component for component, probes in clearing.items()
                  if all(p.clears_in and set(p.clears_in) <= passed_in.get(p.name, set()) and p.name not in failed
                         for p in probes))


def run_probes(ctx: ProbeContext, out_dir: Path, checkpoint_dir: Path | None = None) -> Checkup:
    """Every probe that applies, at the start (`ctx`) and in the moved state (the run's
    checkpoint in `checkpoint_dir`, else a few real iterations); writes out_dir/checkup.json
    with the results (each with its state, specificity and the component it clears), the
    components cleared, the probes that could not run and why, the states, and the
    settings' warnings."""
    results: list[ProbeResult] = []
    records: list[dict] = []
    skipped: dict[str, str] = {}
    passed_in: dict[str, set[str]] = {}
    failed: set[str] = set()
    states = {START.name: START.detail}
    _run_in_state(replace(ctx, where=START, _cache={}), results, records, skipped, passed_in, failed)
    moved_probes = [p for p in PROBES if "moved" in p.states]
    if not ctx.trainer:
        for probe in moved_probes:
            skipped[probe.name if len(probe.states) == 1 else f"{probe.name} (moved)"] = (
                "the moved state is reached by rlhflab's own PPO iterations, not run for another trainer's models")
    else:
        with moved_state(ctx.state, ctx.config, ctx.source, checkpoint_dir) as where:
            states[where.name] = where.detail
            _run_in_state(replace(ctx, where=where, _cache={}), results, records, skipped, passed_in, failed)
    cleared = cleared_components(passed_in, failed)
    checkup = Checkup(results, skipped, cleared, check_settings(ctx.config.ppo), states)
    write_json(Path(out_dir) / "checkup.json", {"probes": records, "cleared": cleared, "skipped": skipped,
                                                "states": states,
                                                "settings": [asdict(s) for s in checkup.settings]})
    return checkup


def run_checkup(config: PipelineConfig, run: RunDir, components: PPOComponents = PPOComponents(),
                trainer: bool = True) -> Checkup:
    """Every probe on a run's models (its stages, or the user's `data.policy` and
    `data.reward_model`) and prompts, at the start and in the moved state (the run's PPO
    checkpoint when it has one); writes RUN/checkup.json. The reward model is tested on the
    held-out share of `data.preferences`, or on fresh labelled world samples.
    `trainer=False` checks models for another trainer: the probes of rlhflab's PPO code
    are listed as not run."""
    state = load_ppo_state(config, run, components, default_device())  # sets the run's precision (use_bf16)
    try:
        starting = policy_dir(config, run)
        context = context_length(starting, config)
        task = prompt_task(config, state.tokenizer, context)
        prompts = task.train.prompts(config.ppo.batch_size, derive_seed(config.seed, "checkup-prompts"))
        pairs = tuple(preference_data(config, state.tokenizer, context)[1]) if config.data.preferences else ()
        ctx = ProbeContext(config, state, task.train, prompts, task.world, pairs, trainer, starting_model=starting)
        return run_probes(ctx, run.root, run.checkpoints / "ppo")
    finally:
        state.sampler.close()

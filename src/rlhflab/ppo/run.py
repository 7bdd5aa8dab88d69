"""Stage 3 as a run: the PPO loop with its run control. It logs `metrics/ppo.jsonl` and
`samples/ppo.jsonl`, writes resumable checkpoints (every `ppo.checkpoint_every`
iterations, on SIGINT/SIGTERM, when stopped early), runs the doctor live (`ppo.stop_on`)
and compares the starting policy with the final one on held-out prompts. The PPO step
itself is `trainer.py`."""

from __future__ import annotations

import signal
import threading
from dataclasses import asdict
from pathlib import Path

from rlhflab.checkpoint import (
    ResumePoint,
    count_lines,
    has_checkpoint,
    save_checkpoint,
    truncate_lines,
)
from rlhflab.config import PipelineConfig, training_keys
from rlhflab.distributed import Cluster
from rlhflab.doctor import Finding, LiveLog, StopRule, Watch, write_diagnosis
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.rollout import Rollout
from rlhflab.ppo.state import PPOState, load_ppo_state
from rlhflab.ppo.trainer import ppo_iteration
from rlhflab.progress import console, progress_bar
from rlhflab.runs import RunDir, append_jsonl, read_jsonl, stage_logger, write_json
from rlhflab.seeding import RowStreams, derive_seed
from rlhflab.sources import context_length, policy_dir, prompt_task


def run_ppo(
    config: PipelineConfig,
    run: RunDir,
    components: PPOComponents = PPOComponents(),
    show_progress: bool = True,
    resume: bool = False,
    cluster: Cluster = Cluster.single(),
    stop_when: StopRule | None = None,
) -> dict[str, dict[str, float]]:
    """Train, log `metrics/ppo.jsonl` and `samples/ppo.jsonl`, save the policy, and
    compare the starting policy with the final one on held-out prompts.

    A resumable checkpoint is written every `ppo.checkpoint_every` iterations, on SIGINT
    or SIGTERM (then the run exits), and when the run stops early. With `resume`, the run
    continues from RUN/checkpoints/ppo: lines logged after that checkpoint are dropped
    and logged again, so the metrics file has every step once. Under torchrun only the
    first process writes files; every process runs the same loop (distributed.py).
    `stop_when` stops the run early like `ppo.stop_on`, on its own condition over the live
    diagnosis (an ablation's arm whose finding is already there)."""
    cfg = config.ppo
    state = load_ppo_state(config, run, components, cluster.device, cluster)
    try:
        is_main = cluster.is_main
        show_progress = show_progress and is_main
        task = prompt_task(config, state.tokenizer, context_length(policy_dir(config, run), config))
        eval_streams = RowStreams(config.ppo_seed, ("eval-sampling",), list(range(len(task.eval_prompts))))
        evaluate = lambda: components.evaluate(state, task.world, task.eval_prompts,  # noqa: E731
                                               cfg.response_length, cfg.temperature, eval_streams)
        checkpoint_dir = run.checkpoints / "ppo"
        if resume and has_checkpoint(checkpoint_dir):
            point = components.restore(checkpoint_dir, state.policy, state.optimizer, state.controller)
            state.sampler.push(state.policy.lm)  # an engine started on the stage-1 weights samples the restored ones
            records = read_jsonl(run.metrics("ppo"))[: point.metrics_lines]
            kept = read_jsonl(run.samples("ppo"))[: point.samples_lines] if run.samples("ppo").is_file() else []
            cluster.barrier()  # every process has read the files before the first one cuts them
            if is_main:
                truncate_lines(run.metrics("ppo"), point.metrics_lines)
                truncate_lines(run.samples("ppo"), point.samples_lines)
                console.print(f"resuming PPO at iteration {point.next_step} from {checkpoint_dir}")
            before, first = point.before, point.next_step
        else:
            before, first, records, kept = evaluate(), 0, [], []
            if is_main:
                run.samples("ppo").unlink(missing_ok=True)

        def checkpoint(next_step: int) -> None:
            lines = (count_lines(run.metrics("ppo")), count_lines(run.samples("ppo"))) if is_main else (0, 0)
            save_checkpoint(checkpoint_dir, state.policy, state.optimizer, state.controller,
                            ResumePoint(next_step, *lines, before, training_keys(config)), cluster)

        logger = stage_logger(run, "ppo", append=first > 0, is_main=is_main)
        watch = LiveDoctor(config, state, records, kept, stop_when)
        stopped, step = None, first - 1
        with StopSignals() as signals, progress_bar("stage 3 ppo", cfg.iterations, show_progress, first) as bar:
            for step in range(first, cfg.iterations):
                prompts = components.prompts(task.train, cfg.batch_size, derive_seed(config.ppo_seed, "ppo-prompts", str(step)))
                rollout, metrics = ppo_iteration(state, prompts, config.ppo_seed, step)
                gold = task.gold(rollout.prompts, rollout.responses) if task.gold is not None else None
                if gold is not None:
                    metrics["reward/gold_mean"] = sum(gold) / len(gold)
                logger.log(step, metrics)
                samples = sample_rows(step, rollout, gold, cfg.samples_per_iteration)
                if is_main:
                    append_jsonl(run.samples("ppo"), samples)
                bar.advance(info=f"proxy {metrics['reward/proxy_mean']:+.2f}"
                                 + (f" gold {metrics['reward/gold_mean']:+.2f}" if gold is not None else "")
                                 + f" kl {metrics['kl/mean']:.2f}")
                stopped = watch.observe(step, metrics, samples)
                # Every process saves the checkpoint together (DCP) and stops together: a signal
                # that reached one process an iteration before another must stop them at one step.
                received = int(cluster.max(float(signals.received)))
                if stopped is not None or received or (cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0):
                    checkpoint(step + 1)
                if received:
                    logger.close()
                    raise Interrupted(received, step + 1, checkpoint_dir)
                if stopped is not None:
                    watch.stop(run, stopped)
                    break
        logger.close()
        after = evaluate()
        summary = {"stage1": before, "policy": after}
        if stopped is not None:
            summary["stopped"] = {"step": step, "rule": stopped.rule, "title": stopped.title}
        weights = state.engine.full_state_dict(state.policy)  # every process takes part in gathering them
        if is_main:
            state.policy.save(run.stage3_policy, state.tokenizer, weights)
            write_json(run.root / "metrics" / "eval.json", summary)
        cluster.barrier()
        return summary
    finally:
        state.sampler.close()  # an inference engine's memory goes back with the run


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived; the run saved a checkpoint after the current iteration."""

    def __init__(self, signum: int, next_step: int, checkpoint_dir: Path) -> None:
        super().__init__(f"stopped by signal {signum} after iteration {next_step - 1}; checkpoint in "
                         f"{checkpoint_dir}; continue with --resume")
        self.signum = signum


class StopSignals:
    """While active, SIGINT and SIGTERM only set `received`: the loop finishes the
    iteration, saves a checkpoint and exits, instead of dying mid-write."""

    def __init__(self) -> None:
        self.received = 0
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        self.received = signum

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


class LiveDoctor:
    """The doctor during training: the run's rows so far in a live log (read as the run's
    files are afterwards), watched every `ppo.doctor_every` iterations for a rule of
    `ppo.stop_on` (or what `stop_when` returns), and a stop after `ppo.max_nonfinite_iterations`
    iterations in a row with a skipped (non-finite) update."""

    def __init__(self, config: PipelineConfig, state: PPOState, records: list[dict] | None = None,
                 samples: list[dict] | None = None, stop_when: StopRule | None = None) -> None:
        self.state = state
        self.live = LiveLog.of_rlhflab(asdict(config), state.reward.model.config.to_dict(), records or [],
                                       samples or [])
        self.watch = Watch(config.ppo.stop_on, config.ppo.doctor_every, stop_when,
                           config.ppo.max_nonfinite_iterations, tell=False)

    def observe(self, step: int, metrics: dict[str, float], samples: list[dict] = ()) -> Finding | None:
        self.live.append({"step": step, **metrics}, samples)
        self.watch.observe(self.live)
        return self.watch.stopped_by

    def stop(self, run: RunDir, finding: Finding) -> None:
        """Save the policy as an HF directory and write the diagnosis that stopped the run
        (every process gathers the weights; the first writes)."""
        weights = self.state.engine.full_state_dict(self.state.policy)
        if not self.state.cluster.is_main:
            return
        self.state.policy.save(run.checkpoints / "stopped", self.state.tokenizer, weights)
        self.watch.diagnosis.source = str(run.root)
        write_diagnosis(self.watch.diagnosis, run.diagnosis)
        console.print(f"[red]stopped at iteration {self.live.rows[-1]['step']}:[/red] {finding.title} "
                      f"(rule {finding.rule}); checkpoint in {run.checkpoints / 'stopped'}")


def sample_rows(step: int, rollout: Rollout, gold: list[float] | None, n: int) -> list[dict]:
    """The first `n` responses of the batch as rows of samples/ppo.jsonl."""
    return [
        {"step": step, "prompt": rollout.prompts[i], "response": rollout.responses[i],
         "proxy": float(rollout.proxy[i]), "ended": bool(rollout.has_eos[i])}
        | ({"gold": gold[i]} if gold is not None else {})
        for i in range(min(n, len(rollout.prompts)))
    ]

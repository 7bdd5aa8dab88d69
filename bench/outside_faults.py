"""The checkup and the doctor on bugs written outside the zoo: twelve mistakes of the kinds
the RLHF literature and issue trackers report, put into the default components the way a
user's own code would have them (this file; neither in the zoo nor in the tests). Each is
trained at demo size from a healthy run's stage-1 and stage-2 models, then checked and
diagnosed as the faults bench does. Written after the checkup's probes by the same hands,
so not blind to them; the zoo and the tests' broken implementations were not reused.

    python bench/outside_faults.py --base runs/faults-bench/healthy-seed0 --out runs/outside-faults \\
        [--only NAME ...] [--rescore] [--doc docs/benchmarks.md]

Reports, per bug: the policy's held-out gold gain over the stage-1 model against the
healthy run's, the probes that failed, the doctor's findings from the metrics, and the
component ranked first by the full doctor and from the metrics alone.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from benchlib import replace_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "## Bugs outside the zoo", "<!-- end outside faults -->"


# --- the bugs -----------------------------------------------------------------------------
def prompts_cut_to_two_words(source, n: int, seed: int) -> list[str]:
    """A preprocessing step that keeps the first two words of each prompt."""
    return [" ".join(p.split()[:2]) for p in source.prompts(n, seed)]


class _TopK(torch.nn.Module):
    def __init__(self, lm: torch.nn.Module, k: int) -> None:
        super().__init__()
        self.lm, self.k = lm, k

    def forward(self, **kwargs):
        out = self.lm(**kwargs)
        kth = out.logits.topk(self.k, dim=-1).values[..., -1:]
        out.logits = out.logits.masked_fill(out.logits < kth, float("-inf"))
        return out


def sample_top_k(model, prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id, generator):
    """Generation with top-k = 10 while the losses use the full distribution."""
    from rlhflab.models.sampling import sample_responses

    return sample_responses(_TopK(model, 10), prompt_ids, prompt_mask, max_new_tokens, temperature, eos_id, pad_id,
                            generator)


def score_before_eos(model, input_ids, attention_mask):
    """The reward read one token early: at the token before EOS, which the RM was not trained to read."""
    from rlhflab.models.forward import padded_forward
    from rlhflab.models.reward_model import last_real_index

    hidden = padded_forward(model.base_model, input_ids, attention_mask).last_hidden_state.float()
    last = (last_real_index(attention_mask) - 1).clamp_min(0)
    return model.score(hidden[torch.arange(hidden.shape[0], device=hidden.device), last]).squeeze(-1)


def value_loss_toward_advantages(values, old_values, returns, mask, clip_eps):
    """The value head regressed on the advantages (returns - old values) instead of the returns."""
    from rlhflab.ppo import losses

    return losses.value_loss(values, old_values, returns - old_values, mask, clip_eps)


def policy_loss_optimistic(logprobs, old_logprobs, advantages, mask, clip_eps):
    """min instead of max of the negated surrogates: the clip bounds the update from the wrong side."""
    from rlhflab.metrics.stats import masked_mean
    from rlhflab.ppo import losses

    ratio = torch.exp(torch.where(mask, logprobs - old_logprobs.detach(), 0.0))
    adv = torch.where(mask, advantages.detach(), 0.0)
    loss = masked_mean(torch.minimum(-adv * ratio, -adv * ratio.clamp(1 - clip_eps, 1 + clip_eps)), mask)
    return loss, losses.policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)[1]


def policy_loss_ratio_inverted(logprobs, old_logprobs, advantages, mask, clip_eps):
    """ratio = pi_old / pi (the log-ratio written the wrong way round)."""
    from rlhflab.ppo import losses

    return losses.policy_loss(2 * old_logprobs.detach() - logprobs, old_logprobs, advantages, mask, clip_eps)


def gae_values_one_late(rewards, values, mask, gamma, lam):
    """Values aligned one token late: V(s_t) read where V(s_{t+1}) belongs."""
    from rlhflab.ppo.advantages import gae

    shifted = torch.where(mask, torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], 1), 0.0)
    return gae(rewards, shifted, mask, gamma, lam)


def gae_lambda_squared(rewards, values, mask, gamma, lam):
    """lam applied twice in the recursion (lam^2 per token)."""
    from rlhflab.ppo.advantages import gae

    return gae(rewards, values, mask, gamma, lam * lam)


def score_on_every_token(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    """The score added to every token's reward, not only to the last one."""
    from rlhflab.ppo.advantages import shape_rewards

    rewards, kl = shape_rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator)
    return rewards + torch.where(mask, scores[:, None].to(rewards.dtype), 0.0), kl


def mask_one_late(mask):
    """The loss mask shifted one position right: the first response token out, one padding token in."""
    return torch.cat([torch.zeros_like(mask[:, :1]), mask[:, :-1]], 1) | (mask.sum(1, keepdim=True) == mask.shape[1])


def whiten_sign_flipped(x, mask, shift_mean=True):
    from rlhflab.metrics.stats import masked_whiten

    return -masked_whiten(x, mask, shift_mean)


def raw_scores_clipped(raw, mean, std, normalize):
    """Raw reward-model scores clipped to [-1, 1] instead of standardised."""
    return raw.clamp(-1.0, 1.0)


@dataclass(frozen=True)
class Bug:
    component: str  # the doctor's component it belongs to
    what: str
    code: dict


BUGS = {
    "prompts_cut_to_two_words": Bug("prompt_data", "prompts cut to their first two words",
                                    {"prompts": prompts_cut_to_two_words}),
    "sample_top_k": Bug("logprob_bookkeeping", "generation with top-k 10, losses on the full distribution",
                        {"sample": sample_top_k}),
    "score_before_eos": Bug("reward_model", "the reward read at the token before EOS", {"score": score_before_eos}),
    "value_toward_advantages": Bug("advantages_values", "the value head regressed on advantages, not returns",
                                   {"value_loss": value_loss_toward_advantages}),
    "clip_optimistic": Bug("advantages_values", "min instead of max in the clipped objective",
                           {"policy_loss": policy_loss_optimistic}),
    "ratio_inverted": Bug("advantages_values", "ratio pi_old / pi", {"policy_loss": policy_loss_ratio_inverted}),
    "gae_values_one_late": Bug("advantages_values", "values aligned one token late in GAE",
                               {"gae": gae_values_one_late}),
    "gae_lambda_squared": Bug("advantages_values", "lam applied twice in GAE", {"gae": gae_lambda_squared}),
    "score_on_every_token": Bug("advantages_values", "the score added to every token's reward",
                                {"shape_rewards": score_on_every_token}),
    "mask_one_late": Bug("advantages_values", "the loss mask shifted one token right",
                         {"response_mask": mask_one_late}),
    "whiten_sign_flipped": Bug("advantages_values", "advantages whitened with their sign flipped",
                               {"whiten": whiten_sign_flipped}),
    "scores_clipped_not_standardised": Bug("reward_scaling", "raw scores clipped to [-1, 1], not standardised",
                                           {"reward_transform": raw_scores_clipped}),
}


def gold_gain(run: Path) -> float:
    evaluation = json.loads((run / "metrics" / "eval.json").read_text())
    return evaluation["policy"]["gold_mean"] - evaluation["stage1"]["gold_mean"]


def first_component(diagnosis) -> str:
    return diagnosis.findings[0].causes[0].component if diagnosis.findings and diagnosis.findings[0].causes else "-"


def run_bug(name: str, base: Path, out: Path, rescore: bool = False) -> dict:
    from rlhflab.checkup import run_checkup
    from rlhflab.config import config_from_run
    from rlhflab.doctor.diagnose import CHECKUP_RULE, diagnose, read_and_diagnose
    from rlhflab.doctor.settings import RunSettings
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.runs import RunDir
    from rlhflab.verify import rerun

    bug = BUGS[name]
    components = replace(PPOComponents(), **bug.code)
    config = config_from_run(base)
    run = RunDir(out / name)
    start = time.perf_counter()
    if not rescore:
        rerun(config, RunDir(base), run, "ppo", components, show_progress=False)
    probes = run_checkup(config, run, components).results
    table, diagnosis = read_and_diagnose(run.root)
    table.settings = RunSettings()
    log_only = diagnose(table)
    row = {"bug": name, "component": bug.component, "what": bug.what, "gold_gain": gold_gain(run.root),
           "healthy_gain": gold_gain(base), "failed_probes": [p.name for p in probes if not p.passed],
           "metric_findings": [f.rule for f in diagnosis.findings if f.rule != CHECKUP_RULE],
           "first": first_component(diagnosis), "log_only_first": first_component(log_only),
           "seconds": json.loads((out / f"{name}.json").read_text())["seconds"] if rescore
           else time.perf_counter() - start}
    (out / f"{name}.json").write_text(json.dumps(row, indent=1))
    print(json.dumps(row), flush=True)
    return row


def render(out: Path) -> str:
    rows = [json.loads((out / f"{name}.json").read_text()) for name in BUGS if (out / f"{name}.json").is_file()]
    healthy = rows[0]["healthy_gain"] if rows else float("nan")
    costly = [r for r in rows if r["gold_gain"] < 0.5 * r["healthy_gain"]]

    def noticed(r: dict) -> bool:
        return bool(r["failed_probes"] or r["metric_findings"])

    lines = [START, "",
             "Command: `python bench/outside_faults.py --base runs/faults-bench/healthy-seed0 --out "
             "runs/outside-faults --doc docs/benchmarks.md` (2-core CPU, demo preset, seed 0; `--rescore` checks and "
             "diagnoses the trained runs again after a change to the checkup or the doctor). Twelve bugs written "
             "outside the zoo and the tests (bench/outside_faults.py), each in one default component; gold gain is "
             f"the policy's held-out gold over the stage-1 model's (healthy: {healthy:+.3f}).", "",
             f"- caught by a failed probe: {sum(bool(r['failed_probes']) for r in rows)} of {len(rows)}; noticed at "
             f"all (a probe or a finding on the metrics): {sum(noticed(r) for r in rows)} of {len(rows)}; right "
             f"component first: {sum(r['first'] == r['component'] for r in rows)} of {len(rows)}",
             f"- of the {len(costly)} that cost the run more than half its gold gain, noticed: "
             f"{sum(noticed(r) for r in costly)} ({', '.join(r['bug'] for r in costly if not noticed(r)) or 'none'} "
             "not)", "",
             "| bug | component | gold gain | failed probes | findings on the metrics | first (full doctor) "
             "| first (metrics alone) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['bug']}`: {r['what']} | {r['component']} | {r['gold_gain']:+.3f} | "
                     f"{', '.join(r['failed_probes']) or 'none'} | {', '.join(r['metric_findings']) or 'none'} | "
                     f"{r['first']}{' (right)' if r['first'] == r['component'] else ''} | {r['log_only_first']} |")
    return "\n".join(lines + ["", END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=ROOT / "runs" / "faults-bench" / "healthy-seed0")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "outside-faults")
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(BUGS))
    parser.add_argument("--doc", type=Path, default=None)
    parser.add_argument("--render-only", action="store_true", help="only write the table of OUT's results")
    parser.add_argument("--rescore", action="store_true", help="check and diagnose OUT's trained runs again")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.render_only:
        for name in args.only or BUGS:
            run_bug(name, args.base, args.out, args.rescore)
    if args.doc is not None:
        replace_section(args.doc, START, END, render(args.out))


if __name__ == "__main__":
    main()

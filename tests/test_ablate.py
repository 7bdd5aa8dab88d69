"""`rlhflab ablate`: the arms it plans, the statistics it ranks them by (against a brute-force
enumeration and hand computations), the "delayed" and "cannot tell" statuses of compare on
logs written here with a known onset, and one small ablation end to end, killed mid-arm
and resumed."""

import itertools
import json
import math
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from rlhflab.config import ConfigError, apply_overrides, config_from_run, load_config, save_config
from rlhflab.doctor.arms import Arm, none_on_arm_p, rank_arms, seeds_for_effect, truth_fall
from rlhflab.doctor.compare import compare_tables
from rlhflab.doctor.findings import Cause, Change, Diagnosis, Finding, Fix
from rlhflab.doctor.formats import read_log


# --- statistics -----------------------------------------------------------------------------
@pytest.mark.parametrize("with_finding,control,arm", [(3, 3, 3), (2, 3, 3), (4, 4, 4), (3, 5, 2), (1, 2, 2)])
def test_fisher_p_matches_enumerating_every_assignment_of_runs(with_finding, control, arm):
    # Null: the runs showing the finding are a random subset of all runs; the chance that
    # the arm's runs hold none of them, counted over every equally likely subset.
    runs = range(control + arm)
    subsets = list(itertools.combinations(runs, with_finding))
    none_on_arm = sum(all(i < control for i in s) for s in subsets)
    assert none_on_arm_p(with_finding, control, arm) == pytest.approx(none_on_arm / len(subsets))


def test_three_seeds_a_side_confirm_only_a_finding_on_every_control_seed():
    assert none_on_arm_p(3, 3, 3) == pytest.approx(1 / 20)  # C(3,3)/C(6,3)
    assert none_on_arm_p(2, 3, 3) == pytest.approx(4 / 20)  # C(4,3)/C(6,3)


def test_seeds_for_effect_is_the_two_sample_size_formula():
    z = 1.959964 + 0.841621  # z_0.975 + z_0.8
    # 2 (z s / d)^2 with s = 0.023, d = 0.05: 3.32 -> 4
    assert seeds_for_effect(0.05, 0.023) == math.ceil(2 * (z * 0.023 / 0.05) ** 2) == 4
    assert seeds_for_effect(1.0, 0.023) == 3  # the findings' test needs 3 whatever the truth says
    assert seeds_for_effect(0.001, 0.023) == 8 and seeds_for_effect(0.0, 0.023) == 8  # capped


def log(tmp_path, name, seed, runaway_from=None, n=80, gold_end=0.5, gold_fall=0.0):
    """A canonical log shaped like a demo run; from step `runaway_from` its KL explodes."""
    rng = random.Random(seed)
    rows, noise = [], 0.0
    for i in range(n):
        t = i / (n - 1)
        noise = 0.7 * noise + rng.gauss(0, 0.02)
        late = runaway_from is not None and i >= runaway_from
        kl = 3.0 * t + 0.1 * abs(rng.gauss(0, 1)) + (0.5 * math.exp(0.15 * (i - runaway_from)) if late else 0.0)
        gold = gold_end * (1 - math.exp(-3 * t)) - gold_fall * max(0.0, t - 0.5) + noise
        rows.append({"step": i, "reward/proxy_mean": 1.5 * (1 - math.exp(-3 * t)) + rng.gauss(0, 0.05),
                     "reward/gold_mean": gold, "kl/mean": kl, "kl/coef": 0.2,
                     "policy/entropy": 2.0 - 0.5 * t + rng.gauss(0, 0.02), "response/length_mean": 20.0,
                     "policy/clipfrac": 0.1, "policy/approxkl": 0.02, "response/eos_rate": 1.0})
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return read_log(path)


def test_a_later_onset_on_every_run_is_delayed_not_gone(tmp_path):
    before = [log(tmp_path, f"b{s}", s, runaway_from=20) for s in range(3)]
    after = [log(tmp_path, f"a{s}", 10 + s, runaway_from=55) for s in range(3)]
    result = compare_tables(before, after)
    status = {f.rule: f.status for f in result.findings}
    assert status["kl_explosion"] == "delayed" and result.verdict == "not fixed"
    same = compare_tables(before, [log(tmp_path, f"c{s}", 20 + s, runaway_from=20) for s in range(3)])
    assert {f.rule: f.status for f in same.findings}["kl_explosion"] == "still there"


def test_absent_from_runs_cut_short_is_cannot_tell_not_gone(tmp_path):
    before = [log(tmp_path, f"b{s}", s, runaway_from=40) for s in range(3)]
    short = [log(tmp_path, f"a{s}", 10 + s, n=35) for s in range(3)]
    result = compare_tables(before, short)
    assert {f.rule: f.status for f in result.findings}["kl_explosion"] == "cannot tell"
    assert result.verdict == "cannot tell"


def test_a_finding_on_one_control_seed_of_three_is_noise_for_the_ranking(tmp_path):
    control = [log(tmp_path, "c0", 0, runaway_from=20)] + [log(tmp_path, f"c{s}", s) for s in (1, 2)]
    arm = [log(tmp_path, f"a{s}", 10 + s) for s in range(3)]
    ranking = rank_arms(control, [(Arm("x", "given", ("ppo.lr=1",), ""), arm)])
    assert ranking.control_counts == {} and ranking.verdict == "cannot tell"


def test_a_cure_on_every_seed_is_confirmed_and_ranked_before_a_partial_one(tmp_path):
    control = [log(tmp_path, f"c{s}", s, runaway_from=20) for s in range(3)]
    cure = [log(tmp_path, f"a{s}", 10 + s) for s in range(3)]
    # the partial arm: the runaway left on one seed of three, its truth a little up (partly fixed needs it not down)
    partial = [log(tmp_path, f"p{s}", 20 + s, runaway_from=20 if s == 0 else None, gold_end=0.52) for s in range(3)]
    ranking = rank_arms(control, [(Arm("partial", "setting", ("ppo.lr=1",), "ppo_hyperparameters"), partial),
                                  (Arm("cure", "setting", ("ppo.kl_coef=0.4",), "kl_control"), cure)])
    assert [o.arm.name for o in ranking.outcomes] == ["cure", "partial"]
    assert ranking.outcomes[0].confirmed and ranking.outcomes[0].p_value == pytest.approx(0.05)
    assert ranking.outcomes[1].comparison.verdict == "partly fixed" and not ranking.outcomes[1].confirmed
    assert ranking.verdict == "confirmed" and "kl_control" in ranking.why
    lower = [log(tmp_path, f"q{s}", 20 + s, runaway_from=20 if s == 0 else None, gold_end=0.495) for s in range(3)]
    fell = rank_arms(control, [(Arm("lower", "setting", ("ppo.lr=1",), "ppo_hyperparameters"), lower)])
    assert fell.outcomes[0].comparison.verdict == "not fixed" and "fell" in fell.outcomes[0].comparison.why


def test_no_setting_cures_it_names_the_component_arm_that_does(tmp_path):
    control = [log(tmp_path, f"c{s}", s, runaway_from=20) for s in range(3)]
    still = [log(tmp_path, f"a{s}", 10 + s, runaway_from=15) for s in range(3)]
    cure = [log(tmp_path, f"k{s}", 20 + s) for s in range(3)]
    ranking = rank_arms(control, [(Arm("lr", "setting", ("ppo.lr=1",), "ppo_hyperparameters"), still),
                                  (Arm("gae", "component", ("components.gae=default",), "gae"), cure)])
    assert ranking.verdict == "no setting cures it" and "PPOComponents.gae" in ranking.why


def test_truth_fall_is_the_drop_from_the_best_level(tmp_path):
    assert truth_fall(log(tmp_path, "flat", 0)) < 0.05
    assert truth_fall(log(tmp_path, "fall", 0, gold_fall=1.0)) > 0.2


# --- the arms ---------------------------------------------------------------------------------
def _finding(rule, causes):
    return Finding(rule, "exploding_kl", "high", rule, 10, (), tuple(causes))


def test_candidate_arms_take_first_causes_first_distinct_and_say_what_they_skip():
    from rlhflab.ablate import candidate_arms

    config = load_config("smoke")
    kl = Cause("kl_control", "weak KL", Fix((Change("kl_coef", "set", 0.4),), ""))
    lr = Cause("ppo_hyperparameters", "steps", Fix((Change("lr", "set", 1e-4),), ""))
    code = Cause("logprob_bookkeeping", "logprobs", None)
    same = Cause("kl_control", "weak KL again", Fix((Change("kl_coef", "set", 0.4),), ""))
    noop = Cause("reward_scaling", "scale", Fix((Change("normalize_reward", "set", True),), ""))
    pairs = Cause("reward_model", "rm", Fix((Change("reward_pairs", "increase"),), ""))
    diagnosis = Diagnosis("x", findings=[_finding("a", [kl, lr, noop]), _finding("b", [code, same, pairs])])
    arms, skipped = candidate_arms(diagnosis, config, top=3)
    assert [a.changes for a in arms] == [("ppo.kl_coef=0.4",), ("ppo.lr=0.0001",)]
    assert arms[0].kind == "setting" and arms[0].component == "kl_control"
    assert any("no setting" in s and "logprob_bookkeeping" in s for s in skipped)
    assert any("already has" in s for s in skipped) and any("increase" in s for s in skipped)
    assert len(candidate_arms(diagnosis, config, top=1)[0]) == 1


def test_component_arms_one_per_non_default_component():
    from rlhflab.ablate import component_arms
    from rlhflab.faults.zoo import components_for, with_fault
    from rlhflab.ppo.components import record_components

    config = with_fault(load_config("smoke"), "missing_eos_penalty_off_and_no_eos")
    config = record_components(config, components_for(config))
    arms = component_arms(config)
    assert [a.changes for a in arms] == [("components.sample=default",)] and arms[0].kind == "component"
    swapped = apply_overrides(config, {"components.sample": "default"})
    assert components_for(swapped).sample is components_for(load_config("smoke")).sample
    assert swapped.ppo.missing_eos_penalty == 0.0  # the fault's setting stays: one change at a time


# --- the components record and ppo.seed -------------------------------------------------------
def test_components_record_round_trips_through_config_toml(tmp_path):
    from rlhflab.faults.zoo import components_for, with_fault
    from rlhflab.ppo.components import record_components

    config = with_fault(load_config("smoke"), "gae_reversed")
    config = record_components(config, components_for(config))
    save_config(config, tmp_path / "config.toml")
    read = config_from_run(tmp_path)
    assert read.components == config.components
    assert dict(read.components)["gae"] == "rlhflab.faults.zoo:gae_forward_in_time"
    assert components_for(read).gae.__name__ == "gae_forward_in_time"
    # a fault injected into a config that records its components writes its code there
    recorded = record_components(load_config("smoke"), components_for(load_config("smoke")))
    assert dict(with_fault(recorded, "gae_reversed").components)["gae"].endswith(":gae_forward_in_time")


def test_bad_component_entries_are_config_errors():
    from rlhflab.faults.zoo import components_for

    with pytest.raises(ConfigError, match="module:function"):
        apply_overrides(load_config("smoke"), {"components.gae": "not a path"})
    with pytest.raises(ConfigError, match="not a PPO component"):
        components_for(apply_overrides(load_config("smoke"), {"components.nope": "default"}))
    with pytest.raises(ConfigError, match="cannot import"):
        components_for(apply_overrides(load_config("smoke"), {"components.gae": "rlhflab.ppo.advantages:nope"}))


def test_ppo_seed_defaults_to_the_run_seed():
    config = load_config("smoke", overrides=["seed=7"])
    assert config.ppo_seed == 7 and apply_overrides(config, {"ppo.seed": 9}).ppo_seed == 9


# --- end to end -------------------------------------------------------------------------------
def _steps(path):
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_ablate_end_to_end_killed_mid_arm_and_resumed(tmp_path):
    """A smoke run with a 100x learning rate, ablated with its top fix over 2 seeds; the
    first attempt is killed while an arm's seed trains, the second resumes it."""
    from rlhflab.cli import main

    run = tmp_path / "run"
    with pytest.raises(SystemExit):
        main(["pipeline", "--preset", "smoke", "--out", str(run), "--quiet", "ppo.lr=0.1",
              "ppo.iterations=20", "ppo.checkpoint_every=5"])
    command = [sys.executable, "-m", "rlhflab.cli", "ablate", str(run), "--top", "1", "--seeds", "2", "--quiet"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    plan = run / "ablate" / "plan.json"
    deadline = time.time() + 300
    target = None
    while time.time() < deadline and proc.poll() is None:
        if plan.is_file():
            arm = json.loads(plan.read_text())["arms"][0]["name"]
            metrics = run / "ablate" / arm / "seed0" / "metrics" / "ppo.jsonl"
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= 7:
                target = metrics
                os.killpg(proc.pid, signal.SIGKILL)
                break
        time.sleep(0.2)
    proc.wait()
    assert target is not None, "the ablation ended before an arm's seed could be killed"
    assert not (target.parent.parent / "seed.json").is_file()
    with pytest.raises(SystemExit) as refused:  # an ablation is there: continued only with --resume
        main(["ablate", str(run), "--seeds", "2", "--quiet"])
    assert refused.value.code == 2
    with pytest.raises(SystemExit) as resumed:
        main(["ablate", str(run), "--resume", "--quiet"])
    assert resumed.value.code in (0, 1, 3)
    result = json.loads((run / "ablate" / "ablate.json").read_text())
    assert result["plan"]["seeds"] == [0, 1] and result["verdict"] in ("confirmed", "not confirmed",
                                                                     "no setting cures it", "cannot tell")
    for arm in ["control"] + [a["name"] for a in result["plan"]["arms"]]:
        for seed in (0, 1):
            out = run / "ablate" / arm / f"seed{seed}"
            assert (out / "seed.json").is_file()
            steps = _steps(out / "metrics" / "ppo.jsonl")
            assert steps == sorted(set(steps)) and steps[0] == 0  # each step once, after the kill too
    # stages 1-2 shared by hard link with the run, not copied
    weights = "model.safetensors"
    arm_dir = run / "ablate" / result["plan"]["arms"][0]["name"] / "seed1"
    assert os.stat(arm_dir / "stage1_lm" / weights).st_ino == os.stat(run / "stage1_lm" / weights).st_ino
    assert os.stat(arm_dir / "stage2_rm" / weights).st_ino == os.stat(run / "stage2_rm" / weights).st_ino
    assert config_from_run(arm_dir).ppo_seed == 1 and config_from_run(arm_dir).seed == 0
    took = result["time"]  # how long it took: this invocation, and each arm's seed runs (the killed one's last stretch)
    assert took["wall_s"] > 0 and set(took["seed_runs_s"]) == {"control", *(a["name"] for a in result["plan"]["arms"])}
    assert all(seconds > 0 for name, seconds in took["seed_runs_s"].items())  # control: its second seed ran here
    page = (run / "ablate" / "report.html").read_text()
    assert "Verdict:" in page and page.index("Verdict:") < page.index("<img") < page.index("Arms, best first")
    assert "s of wall time" in page
    assert "Ablation (2 seeds a side)" in (run / "report.html").read_text()
    # each arm's truth as a judge's preference over the control (the world's simulated labeler)
    with pytest.raises(SystemExit) as judged:
        main(["ablate", str(run), "--resume", "--quiet", "--judge", f"world:{run}"])
    assert judged.value.code in (0, 1, 3)
    result = json.loads((run / "ablate" / "ablate.json").read_text())
    for arm in result["arms"]:
        assert arm["comparison"]["truth"]["metric"] == "preference"
    study = run / "ablate" / "studies" / "pairs"
    assert (study / "study.sqlite").is_file() and (run / "ablate" / "control" / "seed0" / "samples" / "policy.jsonl").is_file()


def test_a_run_with_nothing_to_ablate_is_refused_before_anything_is_written(smoke_run):
    from rlhflab.ablate import AblateError, plan_ablation

    with pytest.raises(AblateError, match="nothing to ablate.*--fix"):
        plan_ablation(smoke_run.root)
    assert not smoke_run.ablate.exists()
    plan = plan_ablation(smoke_run.root, fixes=["ppo.kl_coef=0.4,ppo.lr=0.0001"], seeds=2)
    assert [a.changes for a in plan.arms] == [("ppo.kl_coef=0.4", "ppo.lr=0.0001")] and plan.seeds == [0, 1]
    assert plan.warnings and "below" in plan.warnings[0]
    with pytest.raises(ConfigError):
        plan_ablation(smoke_run.root, fixes=["ppo.nope=1"])


def test_without_a_finding_a_cure_is_the_truth_risen_beyond_its_interval(tmp_path):
    control = [log(tmp_path, f"c{s}", s, gold_end=0.2) for s in range(3)]
    better = [log(tmp_path, f"a{s}", 10 + s, gold_end=0.5) for s in range(3)]
    same = [log(tmp_path, f"b{s}", 20 + s, gold_end=0.2) for s in range(3)]
    ranking = rank_arms(control, [(Arm("same", "setting", ("ppo.lr=1",), "ppo_hyperparameters"), same),
                                  (Arm("gae", "component", ("components.gae=default",), "gae"), better)])
    assert ranking.control_counts == {} and ranking.outcomes[0].arm.name == "gae"
    assert ranking.outcomes[0].confirmed and ranking.outcomes[0].comparison.truth.low > 0
    assert not ranking.outcomes[1].confirmed
    assert ranking.verdict == "no setting cures it" and "PPOComponents.gae" in ranking.why


def test_a_cure_whose_truth_stays_below_a_better_cure_only_masks_the_cause(tmp_path):
    # As a smaller learning rate over a logprob bug: the symptoms go, the policy barely learns.
    control = [log(tmp_path, f"c{s}", s, runaway_from=20, gold_end=0.2) for s in range(3)]
    held_back = [log(tmp_path, f"a{s}", 10 + s, gold_end=0.2) for s in range(3)]
    real = [log(tmp_path, f"k{s}", 20 + s, gold_end=0.5) for s in range(3)]
    ranking = rank_arms(control, [(Arm("lr", "setting", ("ppo.lr=1e-5",), "ppo_hyperparameters"), held_back),
                                  (Arm("logits", "component", ("components.response_logits=default",),
                                       "response_logits"), real)])
    by_name = {o.arm.name: o for o in ranking.outcomes}
    assert by_name["lr"].cures and by_name["lr"].masked_by == "logits" and not by_name["lr"].confirmed
    assert by_name["logits"].confirmed and ranking.outcomes[0].arm.name == "logits"
    assert ranking.verdict == "no setting cures it" and "response_logits" in ranking.why

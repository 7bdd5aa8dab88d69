"""Logs of researchers' own loops, read without a map: each fixture is written the way a
public loop's logging code writes its rows (the repository and file are named beside it),
and the test asserts what each name was taken for, what was kept apart, and why."""

import csv
import json
import math

import pytest

from rlhflab.doctor.diagnose import diagnose, diagnosis_json
from rlhflab.doctor.formats import read_log
from rlhflab.doctor.formats.mapping import parse_pairs
from rlhflab.doctor.formats.resolver import normalise, resolve


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_csv(path, rows):
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def taken(table) -> dict:
    return {g["name"]: g["taken_for"] for g in table.guesses}


@pytest.mark.parametrize("name, base, statistic", [
    ("train_reward", "reward", ""), ("reward/mean", "reward", "mean"), ("train/kl", "kl", ""),
    ("policy/entropy_avg", "entropy", "mean"), ("actor/grad_norm", "grad_norm", ""),
    ("critic/score/mean", "critic_score", "mean"), ("Reward-Mean", "reward", "mean"), ("losses/approx_kl", "approx_kl", ""),
    ("reward_std", "reward", "std"), ("response_length/max", "response_length_max", "other"),
    ("optim/lr", "lr", ""), ("mean_reward", "reward", "mean"),
])
def test_normalise_takes_off_scopes_statistics_separators_and_case(name, base, statistic):
    assert normalise(name) == (base, statistic)


def test_cleanrl_ppo_names(tmp_path):
    """vwxyzjn/cleanrl cleanrl/ppo.py: `writer.add_scalar("losses/approx_kl", ...)` and the
    others, one row per update, step `global_step`."""
    rows = [{"global_step": 128 * i, "charts/learning_rate": 2.5e-4, "losses/value_loss": 1.0 / (i + 1),
             "losses/policy_loss": -0.01, "losses/entropy": 1.2 - 0.01 * i, "losses/old_approx_kl": 0.002,
             "losses/approx_kl": 0.0021, "losses/clipfrac": 0.05, "losses/explained_variance": 0.1 * min(i, 9)}
            for i in range(30)]
    table = read_log(write_jsonl(tmp_path / "cleanrl.jsonl", rows))
    got = taken(table)
    assert got["charts/learning_rate"] == "lr" and got["losses/value_loss"] == "value/loss"
    assert got["losses/policy_loss"] == "policy/loss" and got["losses/entropy"] == "policy/entropy"
    assert got["losses/approx_kl"] == "policy/approxkl" and got["losses/clipfrac"] == "policy/clipfrac"
    assert got["losses/explained_variance"] == "value/explained_variance"
    assert table.get("policy/entropy").values[0] == pytest.approx(1.2)
    # old_approx_kl and approx_kl both spell the old-vs-new KL: one is read, the other said not to be
    assert any("policy/approxkl read from" in n for n in table.notes)


def test_nano_aha_moment_names_keep_the_evaluation_apart_and_not_as_gold(tmp_path):
    """McGill-NLP/nano-aha-moment nano_r1_script.py: `train/<k>` and `eval/<k>` keyed by
    `iteration`; `train/kl_penalty` is the per-token k3 KL to the reference."""
    rows = []
    for i in range(40):
        row = {"iteration": i, "train/rewards": 0.2 + 0.01 * i, "train/kl_penalty": 0.001 * (i + 1),
               "train/entropy": 0.9, "train/response_lengths": 200 + i, "train/non_stop_rate": 0.05,
               "train/grad_norm": 0.4, "train/learning_rate": 1e-6}
        if i % 10 == 0:
            row["eval/rewards"] = 0.3 + 0.005 * i
        rows.append(row)
    table = read_log(write_jsonl(tmp_path / "aha.jsonl", rows))
    got = taken(table)
    assert got["train/rewards"] == "reward/proxy_mean" and got["train/kl_penalty"] == "kl/token_mean"
    assert got["train/response_lengths"] == "response/length_mean"
    assert got["train/non_stop_rate"] == "response/truncated_frac"
    assert got["eval/rewards"] == "eval/rewards" and "eval/rewards" in table.evaluation
    assert table.get("reward/gold_mean") is None and not table.settings.has_gold
    why = next(g["why"] for g in table.guesses if g["name"] == "eval/rewards")
    assert "not a gold signal" in why


def test_a_user_map_names_an_evaluation_the_truth(tmp_path):
    rows = [{"step": i, "train_reward": 0.1 * i, "eval_reward": 0.05 * i} for i in range(20)]
    path = write_jsonl(tmp_path / "own.jsonl", rows)
    assert read_log(path).get("reward/gold_mean") is None
    mapped = read_log(path, parse_pairs(["eval_reward=reward/gold_mean"]))
    assert mapped.get("reward/gold_mean") is not None and "eval_reward" not in taken(mapped)


def test_a_bare_kl_is_the_kl_to_the_reference_when_an_old_vs_new_kl_is_its_neighbour(tmp_path):
    rows = [{"step": i, "reward": 0.1, "kl": 0.01, "approx_kl": 0.001} for i in range(20)]
    table = read_log(write_jsonl(tmp_path / "a.jsonl", rows))
    assert taken(table)["kl"] == "kl/token_mean"
    assert "approx_kl is the old-vs-new" in next(g["why"] for g in table.guesses if g["name"] == "kl")


def test_a_bare_kl_is_the_kl_to_the_reference_when_a_kl_coefficient_is_logged(tmp_path):
    rows = [{"step": i, "reward": 0.1, "kl": 0.01, "beta": 0.04} for i in range(20)]
    table = read_log(write_jsonl(tmp_path / "b.jsonl", rows))
    assert taken(table)["kl"] == "kl/token_mean" and taken(table)["beta"] == "kl/coef"


def test_a_flat_bare_kl_with_no_neighbour_is_kept_apart(tmp_path):
    """A hand-made table whose `kl` is TRL's `policy/approxkl_avg` renamed: small and flat."""
    rows = [{"update": i, "reward_mean": 0.3, "kl": 5e-4 * (1 + 0.5 * math.sin(i)), "clip_fraction": 0.01,
             "ratio_mean": 0.995} for i in range(32)]
    table = read_log(write_csv(tmp_path / "t.csv", rows))
    assert taken(table)["kl"] is None and "kl" in table.unknown
    assert table.get("kl/token_mean") is None and table.get("policy/approxkl") is None
    assert "--map kl=kl/token_mean" in next(g["why"] for g in table.guesses if g["name"] == "kl")
    assert table.steps_read == 32  # `update` is the step column


def test_the_issues_own_loop_a_saturating_reward_and_a_kl_grown_a_thousandfold_is_a_finding(tmp_path):
    """A researcher's loop logging `train_reward`, `reward/mean`, `kl`, `grad_norm`,
    `completion_tokens`, `eval_reward`, `policy/entropy` (a wandb.log dict per step): the
    reward saturates while the KL to the base model grows 1000-fold."""
    rows = []
    for i in range(60):
        reward = 1 - math.exp(-i / 8)
        rows.append({"step": i, "train_reward": reward, "reward/mean": reward, "kl": 0.001 * 1000 ** (i / 59),
                     "grad_norm": 0.5, "completion_tokens": 120 + i, "policy/entropy": 1.5 - 0.01 * i,
                     **({"eval_reward": reward * 0.9} if i % 10 == 0 else {})})
    table = read_log(write_jsonl(tmp_path / "own.jsonl", rows))
    got = taken(table)
    assert got["kl"] == "kl/token_mean" and "grows" in next(g["why"] for g in table.guesses if g["name"] == "kl")
    assert got["grad_norm"] == "policy/grad_norm" and got["completion_tokens"] == "response/length_mean"
    assert got["eval_reward"] == "eval/reward" and table.get("reward/gold_mean") is None
    diagnosis = diagnose(table)
    assert diagnosis.verdict == "finding" and "kl_explosion" in {f.rule for f in diagnosis.findings}
    saved = diagnosis_json(diagnosis)
    assert {g["name"] for g in saved["name_guesses"]} >= {"kl", "train_reward", "eval_reward", "completion_tokens"}


def test_one_name_a_trainer_also_logs_does_not_make_an_own_loop_that_trainer(tmp_path):
    """`reward_std` is a name TRL GRPO logs, and so do many loops: alone it claims nothing."""
    rows = [{"step": i, "reward_mean": 0.1 * i, "reward_std": 0.2, "kl": 0.01} for i in range(20)]
    table = read_log(write_jsonl(tmp_path / "own.jsonl", rows))
    assert table.settings.trainer == "canonical" and taken(table)["reward_std"] == "reward/proxy_std"


@pytest.mark.parametrize("values, metric, sign", [([0.8, 0.7, 0.6], "policy/entropy", 1.0),
                                                  ([-0.8, -0.7, -0.6], "policy/entropy", -1.0),
                                                  ([-0.1, 0.2, 0.3], None, None)])
def test_an_entropy_loss_is_read_by_its_sign(values, metric, sign):
    guess = resolve({"train/entropy_loss"}, lambda name: values)[0]
    assert guess.metric == metric
    if sign is not None:
        assert guess.column.scale == sign


def test_trl_ppo_value_statistics_under_val_are_not_evaluations_and_a_total_loss_is_not_a_policy_loss():
    guesses = {g.name: g for g in resolve({"val/ratio", "val_accuracy", "loss", "returns"}, lambda name: [])}
    assert "val/ratio" not in guesses or not (guesses["val/ratio"].metric or "").startswith("eval/")
    assert guesses["val_accuracy"].metric == "eval/accuracy"
    assert guesses["loss"].metric is None and guesses["returns"].metric is None


def test_canonical_names_and_known_trainers_are_not_guessed(tmp_path):
    rows = [{"step": i, "reward/proxy_mean": 0.1, "kl/mean": 0.2, "reward/mean": 0.3} for i in range(12)]
    table = read_log(write_jsonl(tmp_path / "c.jsonl", rows))
    assert "reward/proxy_mean" not in taken(table) and table.get("kl/mean") is not None
    # reward/mean is another spelling of the proxy the log already has by name: read once, noted
    assert any("reward/proxy_mean read from" in n for n in table.notes)


def test_every_listed_spelling_resolves_to_its_own_family():
    from rlhflab.doctor.formats.resolver import MEANS, SPREADS, _lookup
    from rlhflab.doctor.metrics import KNOWN

    for family in MEANS:
        for spelling in family.spellings - KNOWN:  # `lr` is canonical as it is
            guesses = resolve({spelling}, lambda name: [])
            assert guesses and guesses[0].metric == family.metric, (spelling, guesses)
    for family in SPREADS:
        for spelling in family.spellings:
            guess = resolve({f"{spelling}_std"}, lambda name: [])[0]
            assert guess.metric == family.metric or _lookup(MEANS, f"{spelling}_std") is not None, spelling


def test_the_critics_numbers_are_not_read_as_the_policys():
    guesses = {g.name: g.metric for g in resolve({"critic/grad_norm", "critic/clipfrac", "critic/lr", "critic/vf_loss",
                                                  "critic/score/mean"}, lambda name: [])}
    assert "critic/grad_norm" not in guesses and "critic/clipfrac" not in guesses and "critic/lr" not in guesses
    assert guesses["critic/vf_loss"] == "value/loss" and guesses["critic/score/mean"] == "reward/proxy_mean"


def test_a_bare_kl_beside_canonical_names_is_told_by_them():
    values = lambda name: [0.001] * 20  # noqa: E731 - flat: its level says nothing
    assert resolve({"kl"}, values, {"kl", "policy/approxkl"})[0].metric == "kl/token_mean"
    assert resolve({"kl"}, values, {"kl", "kl/coef"})[0].metric == "kl/token_mean"
    assert resolve({"kl"}, values, {"kl", "kl/mean"})[0].metric is None  # a KL to the reference already named


def test_a_k1_kl_around_zero_is_not_read_as_growing():
    around_zero = [-0.001, 0.0005, -0.0002, 0.001] * 5 + [0.002, 0.003, 0.004, 0.005] * 5
    assert resolve({"kl"}, lambda name: around_zero)[0].metric is None


def test_a_name_the_log_logs_as_the_metric_wins_over_a_guessed_one(tmp_path):
    rows = [{"step": i, "train_reward": 0.1 * i, **({"reward/proxy_mean": 0.1 * i} if i % 10 == 0 else {})}
            for i in range(40)]
    table = read_log(write_jsonl(tmp_path / "both.jsonl", rows))
    assert len(table.get("reward/proxy_mean")) == 4 and any("read from reward/proxy_mean" in n for n in table.notes)

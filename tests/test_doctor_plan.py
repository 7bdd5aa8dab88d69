"""`rlhflab doctor LOG --plan`: the ablation plan for another trainer's log, each command in
the trainer's own syntax and checked by the trainer's own parser where it is installed
(TRL's HfArgumentParser over GRPOConfig, veRL's ppo_trainer.yaml composed by Hydra), else
by the key list stored with the launcher."""

import json
import math
import shlex
from pathlib import Path

import pytest

from rlhflab.cli import main
from rlhflab.doctor.diagnose import read_and_diagnose
from rlhflab.doctor.plan import LAUNCHERS_BY_DIALECT, AblationPlan, plan_for_log, set_key
from rlhflab.doctor.plan_check import check_plan, verl_config_dir

LOGS = Path(__file__).parent / "fixtures" / "logs"
VERL = LOGS / "verl_console_late.log"
OPENRLHF = LOGS / "openrlhf_wandb.csv"


def grpo_kl_runaway(tmp_path) -> Path:
    """A TRL GRPO trainer_state.json (TRL's own names, beta 0.04 so `kl` is logged) whose KL
    explodes while the reward climbs."""
    history = []
    for step in range(1, 61):
        t = step / 60
        history.append({"step": step, "kl": 0.01 * math.exp(7 * t), "reward": 2 * t, "reward_std": 0.5,
                        "entropy": 2.0 - 1.2 * t, "learning_rate": 1e-5, "grad_norm": 1.0, "loss": 0.0,
                        "completions/mean_length": 40.0, "completions/clipped_ratio": 0.0,
                        "frac_reward_zero_std": 0.0, "clip_ratio/region_mean": 0.01})
    out = tmp_path / "grpo-run"
    out.mkdir()
    (out / "trainer_state.json").write_text(json.dumps({"log_history": history, "global_step": 60}))
    return out


def planned(log: Path, **options) -> tuple[AblationPlan, object]:
    table, diagnosis = read_and_diagnose(log)
    plan = plan_for_log(table, diagnosis, **options)
    return plan, LAUNCHERS_BY_DIALECT[table.settings.trainer]


def test_a_verl_plan_replaces_the_users_keys_gives_each_run_its_seed_and_directory_and_composes_in_hydra():
    if verl_config_dir() is None:
        pytest.skip("veRL's config files are not installed (make install puts them in .venv)")
    command = "python3 -m verl.trainer.main_ppo data.train_files=t.parquet actor_rollout_ref.actor.optim.lr=1e-6"
    plan, launcher = planned(VERL, command=command, top=2)
    assert plan.seeds == [0, 1, 2] and "3 seeds" in plan.seeds_why  # the floor of the findings' test, said
    assert set(plan.arms) == {"control", "kl_loss_coef-0.2", "lr-2e-07"}
    dirs = {r.out for r in plan.runs}
    assert len(dirs) == len(plan.runs) == 9
    for run in plan.runs:
        tokens = shlex.split(run.command.split(" && ", 1)[1].split(" 2>&1")[0])
        lr = [t for t in tokens if t.startswith("actor_rollout_ref.actor.optim.lr=")]
        assert lr == (["actor_rollout_ref.actor.optim.lr=2e-07"] if run.arm == "lr-2e-07"
                      else ["actor_rollout_ref.actor.optim.lr=1e-6"])  # replaced, never appended twice
        assert f"data.seed={run.seed}" in tokens and f"trainer.default_local_dir={run.out}" in tokens
        assert run.log == f"{run.out}/console.log"
    assert plan.compare.count(" -- ") == 2  # control -- arm -- arm
    check = check_plan(launcher, plan)
    assert check.ok, check.errors
    assert "Hydra" in check.checked_by and "veRL" in check.checked_by
    # the same parser refuses a key ppo_trainer.yaml does not have
    bad = AblationPlan(plan.trainer, [0], "", {"control": (), "x": ("actor_rollout_ref.actor.no_such_key=1",)},
                       [r for r in plan.runs if r.seed == 0][:1] + [type(plan.runs[0])("x", 0, "o/x", "", "")], "")
    assert any("no_such_key" in e for e in check_plan(launcher, bad).errors)


def test_a_trl_grpo_plan_is_parsed_by_trls_own_argument_parser(tmp_path):
    plan, launcher = planned(grpo_kl_runaway(tmp_path), top=2,
                             command="trl grpo --model_name_or_path m --beta 0.04 --output_dir somewhere",
                             maps=("gold=reward/gold_mean",))
    # the compare reads the planned runs as the log was read
    assert plan.compare.startswith("rlhflab compare --rank --map gold=reward/gold_mean ablation/control/seed0 ")
    assert any(change.startswith("beta=") for changes in plan.arms.values() for change in changes)
    for run in plan.runs:
        tokens = shlex.split(run.command)
        assert tokens.count("--output_dir") == 1 and tokens[tokens.index("--output_dir") + 1] == run.out
        assert tokens.count("--beta") == 1 and tokens[tokens.index("--seed") + 1] == str(run.seed)
        assert run.log == run.out  # TRL writes trainer_state.json into its output_dir
    check = check_plan(launcher, plan)
    assert check.ok, check.errors
    assert check.checked_by.startswith("TRL ") and "GRPOConfig" in check.checked_by
    bad = AblationPlan(plan.trainer, [0], "", {"x": ("no_such_field=1",)}, [type(plan.runs[0])("x", 0, "o", "", "")],
                       "")
    assert any("no_such_field" in e for e in check_plan(launcher, bad).errors)


def test_an_openrlhf_plan_uses_its_dotted_flags_and_its_stored_key_list():
    plan, launcher = planned(OPENRLHF, top=2, command="python3 -m openrlhf.cli.train_ppo_ray --actor.adam.lr=5e-7 "
                             "--train.seed 42")
    for run in plan.runs:
        tokens = shlex.split(run.command.split(" && ", 1)[1].split(" 2>&1")[0])
        assert tokens.count("--train.seed") == 1 and tokens[tokens.index("--train.seed") + 1] == str(run.seed)
        assert sum(t.startswith("--actor.adam.lr") for t in tokens) == 1
    check = check_plan(launcher, plan)
    assert check.ok and "key list of OpenRLHF" in check.checked_by
    assert plan.seeds[0] == 42 and plan.seeds == list(range(42, 42 + len(plan.seeds)))  # the user's seed first
    assert any("advice" in s for s in plan.skipped)  # a fix with no launch key is advice, not planned
    assert not any("reward_pairs" in s or "entropy_coef" in s for s in plan.skipped)  # in words, not our keys


def test_set_key_replaces_in_every_syntax():
    verl, trl = LAUNCHERS_BY_DIALECT["verl"], LAUNCHERS_BY_DIALECT["trl-grpo"]
    openrlhf, prime = LAUNCHERS_BY_DIALECT["openrlhf"], LAUNCHERS_BY_DIALECT["prime-rl"]
    assert set_key(["run", "+a.b=1", "c=2"], verl, "a.b", 3) == ["run", "a.b=3", "c=2"]
    assert set_key(["run"], verl, "a.b", None) == ["run", "a.b=null"]
    assert set_key(["trl", "--beta", "0.1", "--x", "1"], trl, "beta", 0.0) == ["trl", "--x", "1", "--beta", "0"]
    assert set_key(["trl", "--beta=0.1"], trl, "beta", 0.2) == ["trl", "--beta", "0.2"]
    assert set_key(["trl"], trl, "flag", True) == ["trl", "--flag", "True"]
    assert set_key(["o", "--algo.advantage.is_correction_enable"], openrlhf, "algo.advantage.is_correction_enable",
                   False) == ["o"]  # a bare flag: false is its absence
    assert set_key(["rl", "--no-clean"], prime, "clean", True) == ["rl", "--clean"]


def test_doctor_plan_prints_a_runnable_script_and_refuses_what_it_cannot_plan(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["doctor", str(OPENRLHF), "--plan", "--seeds", "2"])
    assert done.value.code == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert all(line.startswith(("#", "mkdir -p ", "rlhflab compare ")) for line in lines)
    assert any(line.startswith("# warning: --seeds 2 is below the 3") for line in lines)
    assert sum(line.startswith("mkdir -p ") for line in lines) == 6  # (control + 2 fixes) x 2 seeds
    with pytest.raises(SystemExit) as done:  # a log with no finding: nothing to plan
        main(["doctor", str(LOGS / "verl_file.jsonl"), "--plan"])
    assert done.value.code == 2


def test_a_trl_plan_keeps_the_users_seed_speaks_only_trls_keys_and_plans_the_length_limit(tmp_path):
    """On a GRPO console saturating its completion length: the length cause is an arm in TRL's own
    key (max_completion_length, twice the run's), the user's --seed 42 is the first seed, and
    nothing of rlhflab's own setting names reaches the plan."""
    from rlhflab.doctor import LAUNCHERS_BY_DIALECT, diagnose, plan_for_log
    from rlhflab.doctor.plan import given_seed
    from test_doctor_rules import table_of

    table = table_of([{"step": s, "response/truncated_frac": 0.1 if s < 10 else 0.95,
                       "reward/proxy_mean": 0.1 + 0.001 * s, "kl/mean": 0.01 * s, "policy/entropy": 1.0,
                       "response/length_mean": 200.0} for s in range(60)], rm=[], accounts=False,
                     trainer="trl-grpo", response_length=256, kl_coef=0.04, lr=1e-6)
    diagnosis = diagnose(table)
    assert "truncation_saturated" in [f.rule for f in diagnosis.findings]
    plan = plan_for_log(table, diagnosis, command="trl grpo --model_name_or_path M --seed 42", top=3)
    assert plan.seeds[0] == 42
    assert any("max_completion_length=512" in change for changes in plan.arms.values() for change in changes)
    text = " ".join([*plan.skipped, *(r.command for r in plan.runs)])
    for ours in ("missing_eos_penalty", "reward_pairs", "entropy_coef", "response_length"):
        assert ours not in text, (ours, text)
    launcher = LAUNCHERS_BY_DIALECT["trl-grpo"]
    assert given_seed(["trl", "--seed=7"], launcher) == 7 and given_seed(["trl"], launcher) == 0

"""Each fault changes exactly its component: under a fixed seed, everything upstream of
the replaced component is bit-identical to the healthy pipeline."""

import dataclasses

import pytest
import torch
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.config import ConfigError, load_config
from rlhflab.faults.zoo import FAULTS, components_for, get_fault, with_fault
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.rollout import make_rollout
from rlhflab.ppo.state import load_ppo_state
from rlhflab.ppo.trainer import compute_advantages
from rlhflab.seeding import torch_generator
from rlhflab.worlds.reviews import ReviewsWorld

# Quantities of one rollout, in pipeline order.
ORDER = ("prompts", "response_ids", "sampled_logprobs", "mask", "logprobs", "values", "ref_logprobs",
         "proxy", "scores", "rewards", "advantages", "returns")
# The first quantity each replaced field may change; everything before it must be identical.
FIRST_AFFECTED = {
    "prompts": "prompts",
    "sample": "response_ids",
    "response_mask": "mask",
    "response_logits": "logprobs",
    "rollout_mode": "logprobs",
    "score": "proxy",
    "reward_transform": "proxy",
    "shape_rewards": "rewards",
    "gae": "advantages",
}


def one_iteration(run, components: PPOComponents) -> dict:
    config = load_config("smoke")
    state = load_ppo_state(config, run, components)
    # Move the policy off the reference (same noise in every call) so the KL is not 0.
    noise = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in state.policy.lm.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=noise))
    world = ReviewsWorld(config.world)
    prompts = components.prompts(world, config.ppo.batch_size, 11)
    rollout, _ = make_rollout(state, prompts, torch_generator(0, "fault-test"))
    adv = compute_advantages(state, rollout)
    values = {name: getattr(rollout, name) for name in ORDER if hasattr(rollout, name)}
    values |= {"rewards": adv.rewards, "advantages": adv.advantages, "returns": adv.returns}
    return values


def same(a, b) -> bool:
    if isinstance(a, list):
        return a == b
    return a.shape == b.shape and torch.equal(a, b)


CODE_FAULTS = [f for f in FAULTS if f.code and set(f.code) <= set(FIRST_AFFECTED)]


@pytest.mark.parametrize("fault", CODE_FAULTS, ids=lambda f: f.name)
def test_code_fault_leaves_everything_upstream_of_its_component_identical(smoke_run, fault):
    healthy = one_iteration(smoke_run, PPOComponents())
    broken = one_iteration(smoke_run, fault.components())
    (field,) = [f for f in fault.code]
    first = ORDER.index(FIRST_AFFECTED[field])
    for name in ORDER[:first]:
        assert same(healthy[name], broken[name]), f"{fault.name} changed {name}, upstream of {field}"
    assert not all(same(healthy[n], broken[n]) for n in ORDER[first:]), f"{fault.name} changed nothing"


def test_every_fault_replaces_one_component():
    defaults = PPOComponents()
    base = load_config("demo")
    for fault in FAULTS:
        replaced = [f.name for f in dataclasses.fields(PPOComponents)
                    if getattr(fault.components(), f.name) is not getattr(defaults, f.name)]
        assert replaced == list(fault.code), fault.name
        sections = {key.split(".")[0] for key in fault.config(base)}
        assert len(sections) <= 1, f"{fault.name} configures several stages: {sections}"
        assert fault.code or fault.config(base), f"{fault.name} changes nothing"
        assert len(fault.code) + bool(fault.config(base)) <= 2


def test_reference_is_policy_shares_storage_and_inverted_controller_moves_the_wrong_way(smoke_run):
    state = load_ppo_state(load_config("smoke"), smoke_run, get_fault("ref_is_policy").components())
    assert state.reference is state.policy.lm
    controller = get_fault("adaptive_kl_inverted").components().make_kl_controller(
        with_fault(load_config("smoke"), "adaptive_kl_inverted").ppo)
    before = controller.value
    controller.update(current_kl=100.0, n_steps=64)  # far above target: a correct controller raises beta
    assert controller.value < before


def test_config_faults_are_recorded_and_resolved():
    config = with_fault(load_config("smoke"), "lr_100x")
    assert config.fault == "lr_100x" and config.ppo.lr == pytest.approx(100 * load_config("smoke").ppo.lr)
    assert with_fault(load_config("smoke"), "kl_coef_zero").ppo.kl_coef == 0.0
    with pytest.raises(ConfigError, match="unknown fault 'nope'"):
        with_fault(load_config("smoke"), "nope")
    # A fault named in a config file or override is checked where its components are chosen.
    with pytest.raises(ConfigError, match="fault = 'nope': unknown fault"):
        components_for(load_config("smoke", overrides=["fault=nope"]))


def test_cli_faults_list_and_show():
    listed = CliRunner().invoke(app, ["faults", "list"])
    assert listed.exit_code == 0
    shown = CliRunner().invoke(app, ["faults", "show", "gae_reversed"])
    assert shown.exit_code == 0 and "advantages_values" in shown.output and "gae_forward_in_time" in shown.output
    missing = CliRunner().invoke(app, ["faults", "show", "nope"])
    assert missing.exit_code == 2


def test_faults_bench_scores_the_doctor_and_writes_its_table(tmp_path):
    from rlhflab.faults_bench import run_bench

    doc = tmp_path / "faults.md"
    healthy, rows = run_bench("smoke", [0], tmp_path / "runs", ["gae_reversed", "narrow_prompts"], doc,
                              "rlhflab faults bench --preset smoke")
    by_name = {r.name: r for r in rows}
    assert set(by_name) == {"gae_reversed", "narrow_prompts"} and healthy[0].name == "healthy (seed 0)"
    # Both faults fail the probe written for them, so the checkup names their component (the
    # smoke RM is small enough to fail its health probes too, which rank below).
    assert "gae_matches_naive_loop" in by_name["gae_reversed"].failed_probes
    assert by_name["gae_reversed"].first_component == "advantages_values"
    assert "prompts_distinct" in by_name["narrow_prompts"].failed_probes
    assert by_name["narrow_prompts"].symptom_in_metrics  # prompts_narrow reads prompts/unique_frac
    text = doc.read_text()
    assert "| gae_reversed | advantages_values | yes |" in text and "healthy (seed 0)" in text
    assert "Command: `rlhflab faults bench --preset smoke`" in text
    # Rescoring diagnoses the same runs again without training: same rows, same seconds.
    before = {r.name: r for r in healthy + rows}
    trained = (tmp_path / "runs" / "gae_reversed" / "stage3_policy" / "model.safetensors").stat().st_mtime_ns
    again, again_rows = run_bench("smoke", [0], tmp_path / "runs", ["gae_reversed", "narrow_prompts"], doc,
                                  "rlhflab faults bench --preset smoke --rescore", rescore=True)
    assert {r.name: r for r in again + again_rows} == before
    assert (tmp_path / "runs" / "gae_reversed" / "stage3_policy" / "model.safetensors").stat().st_mtime_ns == trained
    with pytest.raises(FileNotFoundError, match="no timed bench run"):
        run_bench("smoke", [1], tmp_path / "runs", [], doc, "", rescore=True)

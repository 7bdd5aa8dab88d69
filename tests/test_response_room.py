"""A prompt and the response sampled after it must fit the sampling model's positions. The
bound the config check uses (`check_response_room`) is tested against where sampling on a
tiny model of those positions really breaks, then at the places it guards: the pipeline's
command line, before anything is written, and the ablation's candidate arms."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.config import ConfigError, load_config
from rlhflab.doctor.findings import Cause, Change, Diagnosis, Fix
from rlhflab.models.lm import build_tiny_lm
from rlhflab.models.sampling import sample_responses
from rlhflab.preflight import check_response_room
from rlhflab.worlds.reviews import ReviewsWorld


def _sample_and_score(config, new_tokens: int) -> int:
    """Sample `new_tokens` (never ending) after the world's longest prompt, then run the
    forward pass the PPO step runs over prompt and response; the tokens scored."""
    world = ReviewsWorld(config.world)
    tokenizer = world.tokenizer()
    model = build_tiny_lm(tokenizer, config.pretrain, seed=0).eval()
    longest = max(world.prompts(500, 0), key=lambda p: len(tokenizer(p)["input_ids"]))
    ids = torch.tensor([[tokenizer.bos_token_id, *tokenizer(longest)["input_ids"]]])
    samples = sample_responses(model, ids, torch.ones_like(ids, dtype=torch.bool), new_tokens, 1.0, eos_id=-1,
                               pad_id=tokenizer.pad_token_id, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(torch.cat([ids, samples.response_ids], dim=1)).logits
    return logits.shape[1] - ids.shape[1]


def test_the_room_the_check_allows_is_exactly_what_the_model_can_score():
    config = load_config("smoke", overrides=["pretrain.n_layer=1", "pretrain.n_embd=16", "pretrain.n_head=2"])
    room = config.pretrain.n_positions - ReviewsWorld(config.world).longest_prompt_tokens - 1
    for key in ("ppo.response_length", "reward.response_length"):
        check_response_room(load_config("smoke", overrides=[f"{key}={room}"]))
        with pytest.raises(ConfigError, match=rf"{key} = {room + 1}: .*expected at most {room}"):
            check_response_room(load_config("smoke", overrides=[f"{key}={room + 1}"]))
    assert _sample_and_score(config, room) == room
    with pytest.raises(IndexError):  # what the check saves a run from, minutes in
        _sample_and_score(config, room + 1)


def test_user_preferences_free_stage_2_of_the_world_bound_and_stages_not_run_are_not_checked(tmp_path):
    prefs = tmp_path / "prefs.jsonl"
    prefs.write_text('{"prompt": "a", "chosen": "b", "rejected": "c"}\n', encoding="utf-8")
    too_long = load_config("smoke", overrides=["reward.response_length=100", f"data.preferences={prefs}"])
    check_response_room(too_long)  # stage 2 samples nothing when the comparisons are given
    check_response_room(load_config("smoke", overrides=["ppo.response_length=100"]), stages=("pretrain", "reward"))


def test_the_pipeline_refuses_a_response_past_the_model_in_one_line_before_writing(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["pipeline", "--preset", "smoke", "--out", str(out),
                                      "ppo.response_length=64"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "ppo.response_length = 64" in lines[0] and "expected at most 58" in lines[0]
    assert not out.exists()


def test_an_ablation_arm_the_model_cannot_run_is_said_and_skipped_not_crashed():
    from rlhflab.ablate import candidate_arms
    from test_ablate import _finding

    longer = Cause("sampling", "answers cut", Fix((Change("response_length", "set", 64),), ""))
    kl = Cause("kl_control", "weak KL", Fix((Change("kl_coef", "set", 0.4),), ""))
    diagnosis = Diagnosis("x", findings=[_finding("truncation_saturated", [longer, kl])])
    arms, skipped = candidate_arms(diagnosis, load_config("smoke"), top=3)
    assert [a.changes for a in arms] == [("ppo.kl_coef=0.4",)]
    assert any("ppo.response_length = 64" in s and "expected at most 58" in s for s in skipped), skipped
    roomy = load_config("smoke", overrides=["pretrain.n_positions=128"])
    arms, _ = candidate_arms(diagnosis, roomy, top=3)
    assert ("ppo.response_length=64",) in [a.changes for a in arms]

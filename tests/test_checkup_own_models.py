"""The checkup on the user's own HF model directories: a tiny random GPT-2 and a tiny
random Llama saved by the test with a tokenizer, prompts and preference pairs from files."""

import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

from rlhflab.checkup import PROBES
from rlhflab.cli import app
from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig

# The probes of the models themselves, which any trainer relies on; a random model passes them.
MODEL_PROBES = ("kl_zero_before_update", "sampled_logprobs_match_training_forward", "logprob_padding_invariance",
                "reward_padding_invariance", "reward_padding_side_invariance", "mask_covers_response_through_eos",
                "reference_frozen_and_separate", "reference_deterministic", "prompts_distinct")
SMALL = ["ppo.batch_size=8", "ppo.minibatches=2", "ppo.response_length=8"]


def tiny_lm(kind: str, tokenizer):
    torch.manual_seed(0)
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id, vocab_size=len(tokenizer))
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, **ids))
    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                        num_attention_heads=2, num_key_value_heads=1,
                                        max_position_embeddings=64, **ids))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    world = ReviewsWorld(WorldConfig())
    prompts = world.prompts(16, 0)
    (root / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    pairs = [{"prompt": p, "chosen": "a great film", "rejected": "a dull and boring film"} for p in prompts[:8]]
    (root / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    return root, world.tokenizer()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_checkup_runs_the_model_probes_on_own_model_dirs_and_lists_the_trainer_probes_as_not_run(files, kind):
    root, tokenizer = files
    policy, rm = root / f"{kind}-policy", root / f"{kind}-rm"
    tiny_lm(kind, tokenizer).save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    AutoModelForSequenceClassification.from_pretrained(policy, num_labels=1).save_pretrained(rm)
    out = root / f"{kind}-checkup"
    result = CliRunner().invoke(app, ["checkup", "--policy", str(policy), "--reward-model", str(rm),
                                      "--prompts", str(root / "prompts.jsonl"), "--pairs", str(root / "pairs.jsonl"),
                                      "--out", str(out), *SMALL])
    assert result.exit_code in (0, 1), result.output  # 1: a random model fails some probes, as it should
    saved = json.loads((out / "checkup.json").read_text())
    probes = {p["name"]: p for p in saved["probes"]}
    assert all(probes[name]["passed"] for name in MODEL_PROBES), {n: probes[n] for n in MODEL_PROBES}
    assert {"rm_prefers_chosen", "rm_score_not_mostly_length", "responses_end"} <= set(probes)
    # rlhflab's own PPO code is not what another trainer runs, and the moved state is reached by
    # it: those probes are listed, not run (a probe of both states once per state).
    # The held-out part of a prompt space is the world's: own prompt files are split when read.
    assert {p.name for p in PROBES if p.needs_trainer or "moved" in p.states} | {"training_prompts_not_held_out"} == {
        key.split(" (")[0] for key in saved["skipped"]}
    assert "one_update_moves_the_right_way" in result.output and "not run" in result.output


def test_checkup_without_pairs_skips_the_reward_model_probes_and_says_why(files):
    root, tokenizer = files
    policy, rm = root / "np-policy", root / "np-rm"
    tiny_lm("gpt2", tokenizer).save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    AutoModelForSequenceClassification.from_pretrained(policy, num_labels=1).save_pretrained(rm)
    CliRunner().invoke(app, ["checkup", "--policy", str(policy), "--reward-model", str(rm),
                             "--prompts", str(root / "prompts.jsonl"), "--out", str(root / "np"), *SMALL])
    saved = json.loads((root / "np" / "checkup.json").read_text())
    assert "--pairs" in saved["skipped"]["reward_model_health"]
    assert "rm_prefers_chosen" not in {p["name"] for p in saved["probes"]}


def test_checkup_names_a_model_dir_without_tokenizer_and_a_bad_prompt_line(files):
    root, tokenizer = files
    bare = root / "bare"
    tiny_lm("gpt2", tokenizer).save_pretrained(bare)
    result = CliRunner().invoke(app, ["checkup", "--policy", str(bare), "--reward-model", str(bare),
                                      "--prompts", str(root / "prompts.jsonl")])
    assert result.exit_code == 2 and "no tokenizer" in result.output and "bare" in result.output
    tokenizer.save_pretrained(bare)
    bad = root / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"text": "no prompt field"}\n')
    result = CliRunner().invoke(app, ["checkup", "--policy", str(bare), "--reward-model", str(bare),
                                      "--prompts", str(bad)])
    assert result.exit_code == 2 and "bad.jsonl:2" in result.output and "prompt" in result.output

"""Every stage on the user's own HF model directories and data files: tiny random GPT-2 and
Llama models saved by the test with a tokenizer, SFT, preference and prompt files. No
gold exists there, so gold metrics are absent and the doctor says which rules it skipped."""

import json

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.config import load_config
from rlhflab.data.batching import encode_sft
from rlhflab.data.files import load_preferences
from rlhflab.runs import read_jsonl
from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig

TINY = ["pretrain.steps=4", "pretrain.batch_size=4", "pretrain.eval_every=2", "reward.epochs=1",
        "reward.batch_size=4", "ppo.iterations=2", "ppo.batch_size=8", "ppo.minibatches=2",
        "ppo.response_length=8", "ppo.eval_prompts=4"]


def save_tiny_lm(kind: str, tokenizer, path):
    torch.manual_seed(0)
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id, vocab_size=len(tokenizer))
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, **ids))
    else:
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                             num_attention_heads=2, num_key_value_heads=1,
                                             max_position_embeddings=64, **ids))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("own-data")
    world = ReviewsWorld(WorldConfig())
    tokenizer = world.tokenizer()
    prompts = world.prompts(24, 1)
    reviews = world.corpus(48, 2)
    sft = write_jsonl(root / "sft.jsonl", [{"prompt": p, "completion": r} for p, r in zip(prompts * 2, reviews)])
    prefs = write_jsonl(root / "prefs.jsonl", [{"prompt": p, "chosen": reviews[i], "rejected": reviews[i + 1]}
                                               for i, p in enumerate(prompts)])
    prompt_file = write_jsonl(root / "prompts.jsonl", [{"prompt": p} for p in prompts])
    return root, tokenizer, sft, prefs, prompt_file


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_three_stages_on_own_models_and_files(files, kind):
    root, tokenizer, sft, prefs, prompt_file = files
    model = save_tiny_lm(kind, tokenizer, root / f"{kind}-model")
    run = root / f"{kind}-run"
    invoke("pretrain", "--out", run, "--model", model, "--sft", sft, "--quiet", *TINY)
    invoke("reward", "--out", run, "--preferences", prefs, "--quiet")
    invoke("ppo", "--out", run, "--prompts", prompt_file, "--quiet")
    pretrain = read_jsonl(run / "metrics" / "pretrain.jsonl")
    assert "lm/val_loss" in pretrain[-1] and not any("lm/grammatical_rate" in r for r in pretrain)
    reward = read_jsonl(run / "metrics" / "reward.jsonl")
    assert "rm/val_acc" in reward[-1] and not any("rm/gold_agreement" in r for r in reward)
    ppo = read_jsonl(run / "metrics" / "ppo.jsonl")
    assert [r["step"] for r in ppo] == [0, 1] and not any("reward/gold_mean" in r for r in ppo)
    # The run's config records every input, so `verify` and resumes rerun the same thing.
    config = (run / "config.toml").read_text()
    assert str(sft.resolve()) in config and str(prompt_file.resolve()) in config
    doctor = CliRunner().invoke(app, ["doctor", str(run)])
    assert "reward_hacking_gold" in doctor.output  # listed as not run, for lack of gold


def test_pipeline_on_own_model_with_world_data_keeps_gold(files):
    """Your model on the embedded task: the world's corpus, comparisons and gold still apply."""
    root, tokenizer, *_ = files
    model = save_tiny_lm("llama", tokenizer, root / "llama-world")
    run = root / "llama-world-run"
    invoke("pipeline", "--preset", "smoke", "--out", run, "--quiet", f"data.model={model}",
           "reward.pairs=60", "reward.val_pairs=30", "reward.gold_pairs=30", *TINY)
    ppo = read_jsonl(run / "metrics" / "ppo.jsonl")
    assert all("reward/gold_mean" in r for r in ppo)
    assert "LlamaForCausalLM" in (run / "stage1_lm" / "config.json").read_text()


def test_sft_loss_is_on_the_completion_and_eos_only():
    tokenizer = ReviewsWorld(WorldConfig()).tokenizer()
    ids, mask, targets = encode_sft(tokenizer, [("the film", "was good"), ("", "bad")], 16)
    # Row 0: <bos> the film was good <eos> -> targets are "was", "good", <eos>.
    assert mask[0].tolist()[:6] == [True] * 6 and targets[0].tolist()[:6] == [False, False, False, True, True, True]
    assert ids[0, 5] == tokenizer.eos_token_id
    # Row 1: <bos> bad <eos> -> everything after <bos> is a target (the world's corpus case).
    assert targets[1].tolist()[:3] == [False, True, True] and not targets[1, 3:].any()


def test_bad_inputs_name_the_file_line_or_key(files, tmp_path):
    root, tokenizer, sft, prefs, prompt_file = files
    bare = tmp_path / "bare"
    save_tiny_lm("gpt2", tokenizer, bare)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bare / name).unlink()
    result = CliRunner().invoke(app, ["pretrain", "--out", str(tmp_path / "r1"), "--model", str(bare), *TINY])
    assert result.exit_code == 2 and "no tokenizer" in result.output
    same = write_jsonl(tmp_path / "same.jsonl", [{"prompt": "the film", "chosen": "good", "rejected": "good"},
                                                  {"prompt": "the film", "chosen": "good", "rejected": "bad"},
                                                  {"prompt": "", "chosen": "good", "rejected": "bad"},
                                                  {"prompt": "the plot", "chosen": "fine", "rejected": "dull"}])
    model = save_tiny_lm("gpt2", tokenizer, tmp_path / "model")
    result = CliRunner().invoke(app, ["reward", "--out", str(tmp_path / "r2"), "--model", str(model),
                                      "--preferences", str(same), *TINY])
    assert result.exit_code == 2 and "same.jsonl:1" in result.output.replace("\n", "")
    # --skip-invalid goes on, and says how many records it skipped and where.
    result = CliRunner().invoke(app, ["reward", "--out", str(tmp_path / "r2"), "--model", str(model),
                                      "--preferences", str(same), "--skip-invalid", "--quiet", *TINY])
    text = result.output.replace("\n", "")
    assert result.exit_code == 0 and "2 skipped" in text and "lines 1, 3" in text
    result = CliRunner().invoke(app, ["ppo", "--out", str(tmp_path / "r3"), "--policy", str(model),
                                      "--reward-model", str(tmp_path / "nope"), *TINY])
    assert result.exit_code == 2 and "data.reward_model" in result.output and "not found" in result.output
    with pytest.raises(Exception, match="data.heldout_fraction"):
        load_config("smoke", overrides=["data.heldout_fraction=0.9"])


def test_reward_stage_on_conversational_pairs_rendered_with_the_chat_template(files, tmp_path):
    _, tokenizer, *_ = files
    tokenizer = ReviewsWorld(WorldConfig()).tokenizer()  # a fresh copy: the template is set on it only
    tokenizer.chat_template = ("{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
                               "{% if add_generation_prompt %}assistant {% endif %}")
    model = save_tiny_lm("gpt2", tokenizer, tmp_path / "chat-model")
    world = ReviewsWorld(WorldConfig())
    reviews = world.corpus(24, 3)
    records = [{"prompt": [{"role": "user", "content": p}],
                "chosen": [{"role": "assistant", "content": reviews[2 * i]}],
                "rejected": [{"role": "assistant", "content": reviews[2 * i + 1]}]}
               for i, p in enumerate(world.prompts(12, 3))]
    prefs = write_jsonl(tmp_path / "chat.jsonl", records)
    first = load_preferences(prefs, tokenizer=tokenizer).records[0]
    assert first.prompt == f"user {records[0]['prompt'][0]['content']} assistant " and first.chosen == reviews[0]
    run = tmp_path / "chat-run"
    invoke("reward", "--out", run, "--model", model, "--preferences", prefs, "--quiet", *TINY)
    reward = read_jsonl(run / "metrics" / "reward.jsonl")
    assert "rm/val_acc" in reward[-1] and (run / "stage2_rm" / "model.safetensors").is_file()

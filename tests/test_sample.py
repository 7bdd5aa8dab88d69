"""`rlhflab sample`: any local causal LM's responses to a prompt file, seeded per prompt (the
same responses whatever the batch), resumed after a kill from whole records, chat templates
for message prompts, LoRA adapter directories through peft, and a run's two models on its
held-out prompts with its own settings."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from rlhflab.cli import main
from rlhflab.doctor.formats.sample_files import read_samples
from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tokenizer = ReviewsWorld(WorldConfig()).tokenizer()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, vocab_size=len(tokenizer),
                                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                       pad_token_id=tokenizer.pad_token_id))
    path = tmp_path_factory.mktemp("model") / "lm"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    prompts = ReviewsWorld(WorldConfig()).prompts(7, 1)
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


def run_cli(*args) -> int:
    with pytest.raises(SystemExit) as done:
        main([str(a) for a in args])
    return done.value.code


def sample(model_dir, prompt_file, out, *extra) -> list[dict]:
    code = run_cli("sample", model_dir, "--prompts", prompt_file, "--out", out, "--max-new-tokens", 8, *extra)
    assert code in (0, None)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_responses_are_seeded_per_prompt_not_per_batch_and_the_settings_are_written(model_dir, prompt_file, tmp_path):
    first = sample(model_dir, prompt_file, tmp_path / "a.jsonl", "--seed", 3, "--batch-size", 2)
    assert [r["prompt"] for r in first] == [json.loads(line)["prompt"] for line in prompt_file.read_text().splitlines()]
    assert sample(model_dir, prompt_file, tmp_path / "b.jsonl", "--seed", 3, "--batch-size", 5) == first
    other = sample(model_dir, prompt_file, tmp_path / "c.jsonl", "--seed", 4)
    assert [r["response"] for r in other] != [r["response"] for r in first]
    settings = json.loads((tmp_path / "a.jsonl.settings.json").read_text())
    assert settings["seed"] == 3 and settings["max_new_tokens"] == 8 and settings["model"] == str(model_dir)
    assert read_samples(tmp_path / "a.jsonl").samples[0].response == first[0]["response"]  # a sample file to the readers
    # another seed into the same file is refused: one file, one way of sampling
    assert run_cli("sample", model_dir, "--prompts", prompt_file, "--out", tmp_path / "a.jsonl", "--seed", 9) == 2


def test_a_killed_run_resumes_from_its_whole_records(model_dir, prompt_file, tmp_path):
    whole = sample(model_dir, prompt_file, tmp_path / "whole.jsonl")
    out = tmp_path / "cut.jsonl"
    sample(model_dir, prompt_file, out)
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:3]) + lines[3][:10])  # killed mid-line
    assert sample(model_dir, prompt_file, out) == whole


def test_message_prompts_go_through_the_chat_template(model_dir, tmp_path, capsys):
    messages = tmp_path / "chat.jsonl"
    messages.write_text(json.dumps({"prompt": [{"role": "user", "content": "that film was"}]}) + "\n")
    assert run_cli("sample", model_dir, "--prompts", messages, "--out", tmp_path / "x.jsonl") == 2
    assert "chat template" in capsys.readouterr().err  # said with the file and line
    templated = tmp_path / "templated"
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    GPT2LMHeadModel.from_pretrained(model_dir).save_pretrained(templated)
    tokenizer.save_pretrained(templated)
    (record,) = sample(templated, messages, tmp_path / "y.jsonl")
    assert record["prompt"] == "that film was "


def test_a_lora_adapter_directory_samples_its_base_with_the_adapters_merged(model_dir, prompt_file, tmp_path):
    from peft import LoraConfig, get_peft_model

    adapted = get_peft_model(GPT2LMHeadModel.from_pretrained(model_dir),
                             LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True))
    adapted.peft_config["default"].base_model_name_or_path = str(model_dir)
    adapted.save_pretrained(tmp_path / "adapter")
    # peft starts B at zero: the merged model is the base, so its responses are the base's
    assert sample(tmp_path / "adapter", prompt_file, tmp_path / "lora.jsonl") == \
        sample(model_dir, prompt_file, tmp_path / "base.jsonl")
    for module in adapted.modules():  # trained adapters change what is sampled
        if hasattr(module, "lora_B"):
            torch.nn.init.normal_(module.lora_B["default"].weight, std=1.0)
    adapted.save_pretrained(tmp_path / "trained")
    assert sample(tmp_path / "trained", prompt_file, tmp_path / "trained.jsonl") != \
        sample(model_dir, prompt_file, tmp_path / "base2.jsonl")


def test_a_run_samples_its_stage1_model_and_policy_with_its_own_settings(smoke_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(smoke_run.root, run)
    assert run_cli("sample", run) in (0, None)
    config = (run / "config.toml").read_text()
    for name in ("stage1", "policy"):
        records = [json.loads(line) for line in (run / "samples" / f"{name}.jsonl").read_text().splitlines()]
        settings = json.loads((run / "samples" / f"{name}.jsonl.settings.json").read_text())
        assert records and all("gold" in r for r in records)  # the world's runs carry their gold
        assert f"response_length = {settings['max_new_tokens']}" in config
    stage1 = [json.loads(line)["prompt"] for line in (run / "samples" / "stage1.jsonl").read_text().splitlines()]
    policy = [json.loads(line)["prompt"] for line in (run / "samples" / "policy.jsonl").read_text().splitlines()]
    assert stage1 == policy

"""Reward models with a tokenizer of their own: a tiny random BERT-style encoder classifier
(a pooled [CLS] head, no `.score`) and a Llama classifier, each with a vocabulary that
differs from the policy's. PPO must score the text the policy wrote, so each score is
checked against the reward model's own forward on that text, tokenized by its own
tokenizer, alone and unpadded."""

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    LlamaConfig,
    LlamaForSequenceClassification,
    PreTrainedTokenizerFast,
)
from typer.testing import CliRunner

from rlhflab.cli import app
from rlhflab.data.batching import encode_prompts, encode_responses, join_prompt_response
from rlhflab.models.lm import load_tokenizer
from rlhflab.models.reward_model import load_reward_model, load_reward_tokenizer, score_sequences
from rlhflab.ppo.reward import RewardFunction, reward_encoder
from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig


def word_tokenizer(words: list[str], specials: list[str], template: str | None, **special_tokens):
    """A word-level fast tokenizer whose ids are not the world tokenizer's."""
    vocab = {token: i for i, token in enumerate(specials + words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=special_tokens["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if template is not None:
        core.post_processor = processors.TemplateProcessing(
            single=template, special_tokens=[(t, vocab[t]) for t in specials if t in template])
    return PreTrainedTokenizerFast(tokenizer_object=core, **special_tokens)


@pytest.fixture(scope="module")
def reward_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("rm-tokenizers")
    words = sorted(ReviewsWorld(WorldConfig()).grammar.vocabulary, reverse=True)
    torch.manual_seed(0)
    bert_tok = word_tokenizer(words, ["[PAD]", "[UNK]", "[CLS]", "[SEP]"], "[CLS] $A [SEP]", pad_token="[PAD]",
                              unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]")
    bert = BertForSequenceClassification(BertConfig(vocab_size=len(bert_tok), hidden_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=64, num_labels=1,
                                                    max_position_embeddings=64, pad_token_id=0))
    llama_tok = word_tokenizer(words, ["<unk>", "<s>", "</s>", "<pad>"], "<s> $A", pad_token="<pad>",
                               unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    llama = LlamaForSequenceClassification(LlamaConfig(
        vocab_size=len(llama_tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, max_position_embeddings=64, num_labels=1, pad_token_id=llama_tok.pad_token_id))
    dirs = {}
    for name, model, tok in (("bert", bert, bert_tok), ("llama", llama, llama_tok)):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        dirs[name] = root / name
    return dirs


def policy_batch(smoke_run, pairs):
    tokenizer = load_tokenizer(smoke_run.stage1_lm)
    prompt_ids, prompt_mask = encode_prompts(tokenizer, [p for p, _ in pairs])
    response_ids, response_mask = encode_responses(tokenizer, [r for _, r in pairs])
    return tokenizer, *join_prompt_response(prompt_ids, prompt_mask, response_ids, response_mask)


# World texts: every word is in the policy's vocabulary, so decoding loses nothing.
_WORLD = ReviewsWorld(WorldConfig())
PAIRS = list(zip(_WORLD.prompts(3, 5), _WORLD.corpus(3, 6)))


def test_the_worlds_reward_model_reads_the_policys_ids_as_they_are(smoke_run):
    tokenizer = load_tokenizer(smoke_run.stage1_lm)
    model = load_reward_model(smoke_run.stage2_rm)
    assert reward_encoder(tokenizer, load_reward_tokenizer(smoke_run.stage2_rm), model) is None


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_a_reward_model_with_its_own_vocabulary_scores_the_text_the_policy_wrote(smoke_run, reward_models, name):
    model = load_reward_model(reward_models[name]).eval()
    rm_tokenizer = load_reward_tokenizer(reward_models[name])
    tokenizer, ids, mask = policy_batch(smoke_run, PAIRS)
    encode = reward_encoder(tokenizer, rm_tokenizer, model)
    assert encode is not None
    reward = RewardFunction(model, 0.0, 1.0, False, 0.0, score_sequences, encode=encode)
    batched = reward.raw_scores(ids, mask)
    with torch.no_grad():
        for row, ((prompt, response), in_batch) in enumerate(zip(PAIRS, batched)):
            alone = rm_tokenizer(f"{prompt} {response}", return_tensors="pt")
            assert alone["input_ids"].shape[1] == len(f"{prompt} {response}".split()) + (2 if name == "bert" else 1)
            expected = model(**alone).logits[0, 0]
            # One row re-tokenized alone reads exactly the reward model's own tokens.
            torch.testing.assert_close(reward.raw_scores(ids[row : row + 1], mask[row : row + 1])[0], expected,
                                       atol=1e-6, rtol=0)
            # Inside a padded batch, within the checkup's padding tolerance (attention kernels
            # with and without a padding mask differ in the last bits).
            torch.testing.assert_close(in_batch, expected, atol=1e-4, rtol=0)


def test_ppo_and_the_checkup_run_on_an_encoder_reward_model_with_its_own_tokenizer(smoke_run, reward_models,
                                                                                     tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p, _ in PAIRS * 4))
    common = ["--policy", str(smoke_run.stage1_lm), "--reward-model", str(reward_models["bert"]), "--prompts",
              str(prompts), "--preset", "smoke"]
    result = CliRunner().invoke(app, ["ppo", "--out", str(tmp_path / "run"), *common, "ppo.iterations=2",
                                      "ppo.batch_size=8", "ppo.minibatches=2", "ppo.eval_prompts=4", "--quiet"])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "run" / "metrics" / "ppo.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["reward/proxy_mean"] == json.loads(lines[0])["reward/proxy_mean"]
    result = CliRunner().invoke(app, ["checkup", *common, "--out", str(tmp_path / "checkup"), "ppo.batch_size=8",
                                      "ppo.minibatches=2"])
    probes = {p["name"]: p for p in json.loads((tmp_path / "checkup" / "checkup.json").read_text())["probes"]}
    assert probes["reward_padding_invariance"]["passed"], probes["reward_padding_invariance"]

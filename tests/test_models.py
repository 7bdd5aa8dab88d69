"""Logprob bookkeeping and reward scoring, each checked against a second code path."""

import math

import pytest
import torch
from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from rlhflab.data.batching import join_prompt_response, length_grouped_batches
from rlhflab.models.forward import response_logprobs
from rlhflab.models.reward_model import last_real_index, score_sequences
from rlhflab.models.sampling import sample_responses
from rlhflab.models.value_head import PolicyWithValue

VOCAB, PAD, BOS, EOS = 40, 0, 1, 2


def tiny_gpt2(seed=0):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=48, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    return GPT2LMHeadModel(config).eval()


def tiny_llama(seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=48,
                         bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    return LlamaForCausalLM(config).eval()


def left_padded_prompts(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD)
    mask = torch.zeros((len(lengths), width), dtype=torch.bool)
    for i, n in enumerate(lengths):
        ids[i, width - n :] = torch.cat([torch.tensor([BOS]), torch.randint(3, VOCAB, (n - 1,), generator=g)])
        mask[i, width - n :] = True
    return ids, mask


def prefix_logprob(model, tokens: list[int], next_token: int, temperature: float) -> float:
    """Second path: run the unpadded prefix alone and read the last position."""
    logits = model(input_ids=torch.tensor([tokens])).logits[0, -1] / temperature
    return float(torch.log_softmax(logits, -1)[next_token])


@pytest.mark.parametrize("make_model", [tiny_gpt2, tiny_llama])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_equal_padded_forward_and_unpadded_prefix(make_model, temperature):
    model = make_model()
    prompt_ids, prompt_mask = left_padded_prompts([2, 5, 3, 4])
    s = sample_responses(model, prompt_ids, prompt_mask, 8, temperature, EOS, PAD, torch.Generator().manual_seed(1))
    ids, mask = join_prompt_response(prompt_ids, prompt_mask, s.response_ids, s.mask)
    with torch.no_grad():
        padded = response_logprobs(model, ids, mask, prompt_ids.shape[1], temperature)
    torch.testing.assert_close(padded[s.mask], s.logprobs[s.mask], atol=1e-5, rtol=0)
    with torch.no_grad():
        for row in range(len(ids)):
            prompt = prompt_ids[row][prompt_mask[row]].tolist()
            response = s.response_ids[row][s.mask[row]].tolist()
            for j, token in enumerate(response):
                expected = prefix_logprob(model, prompt + response[:j], token, temperature)
                assert abs(float(padded[row, j]) - expected) < 1e-5


def test_sampling_stops_rows_at_eos_and_pads_after():
    model = tiny_gpt2()
    prompt_ids, prompt_mask = left_padded_prompts([3] * 16)
    s = sample_responses(model, prompt_ids, prompt_mask, 30, 1.0, EOS, PAD, torch.Generator().manual_seed(0))
    for row in range(16):
        real = s.mask[row]
        # The mask is a prefix, and it ends at the first EOS when there is one.
        n = int(real.sum())
        assert real[:n].all() and not real[n:].any()
        eos_positions = (s.response_ids[row][:n] == EOS).nonzero().flatten().tolist()
        assert eos_positions in ([], [n - 1])
        assert bool(s.has_eos[row]) == (eos_positions == [n - 1])
        assert (s.response_ids[row][n:] == PAD).all()
    # With 40 tokens and 30 steps this seed has rows that end and rows that do not.
    assert s.has_eos.any() and (~s.has_eos).any()


def test_sampling_is_deterministic_per_generator_seed():
    model = tiny_gpt2()
    prompt_ids, prompt_mask = left_padded_prompts([2, 4])
    a = sample_responses(model, prompt_ids, prompt_mask, 10, 1.0, EOS, PAD, torch.Generator().manual_seed(5))
    b = sample_responses(model, prompt_ids, prompt_mask, 10, 1.0, EOS, PAD, torch.Generator().manual_seed(5))
    assert torch.equal(a.response_ids, b.response_ids)


def test_policy_values_align_with_logits_and_ignore_padding():
    policy = PolicyWithValue(tiny_gpt2())
    torch.nn.init.normal_(policy.value_head.weight)
    prompt_ids, prompt_mask = left_padded_prompts([3, 5])
    response = torch.tensor([[7, 8, EOS, PAD], [9, 10, 11, 12]])
    response_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    ids, mask = join_prompt_response(prompt_ids, prompt_mask, response, response_mask)
    with torch.no_grad():
        logits, values = policy(ids, mask, prompt_ids.shape[1], 1.0)
        # Row 0 alone with extra left padding: the same numbers on real tokens.
        extra_ids = torch.cat([torch.full((1, 3), PAD), ids[:1]], dim=1)
        extra_mask = torch.cat([torch.zeros((1, 3), dtype=torch.bool), mask[:1]], dim=1)
        logits2, values2 = policy(extra_ids, extra_mask, prompt_ids.shape[1] + 3, 1.0)
    assert logits.shape == (2, 4, VOCAB) and values.shape == (2, 4)
    torch.testing.assert_close(values2[0, :3], values[0, :3], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits2[0, :3], logits[0, :3], atol=1e-5, rtol=0)


def tiny_reward_model():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=48, n_embd=32, n_layer=2, n_head=2, num_labels=1,
                        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    return GPT2ForSequenceClassification(config).eval()


def test_reward_read_at_last_real_token_under_left_and_right_padding():
    model = tiny_reward_model()
    sequences = [[BOS, 5, 6, 7, EOS], [BOS, 9, EOS], [BOS, 11, 12, 13, 14, 15, EOS]]
    width = max(map(len, sequences))
    alone = torch.stack([score_sequences(model, torch.tensor([s]), torch.ones(1, len(s), dtype=torch.bool))[0]
                         for s in sequences])
    for side in ("left", "right"):
        ids = torch.full((3, width), PAD)
        mask = torch.zeros((3, width), dtype=torch.bool)
        for i, s in enumerate(sequences):
            span = slice(width - len(s), width) if side == "left" else slice(0, len(s))
            ids[i, span], mask[i, span] = torch.tensor(s), True
        with torch.no_grad():
            scores = score_sequences(model, ids, mask)
        torch.testing.assert_close(scores, alone, atol=1e-5, rtol=0)
        if side == "right":
            # Second path: HF's own head, which finds the last non-pad token from pad_token_id.
            with torch.no_grad():
                hf = model(input_ids=ids, attention_mask=mask.long()).logits.squeeze(-1)
            torch.testing.assert_close(scores, hf, atol=1e-5, rtol=0)


def test_last_real_index_with_mixed_padding():
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 1, 0]], dtype=torch.bool)
    assert last_real_index(mask).tolist() == [2, 3, 2]


def test_length_grouped_batches_cover_every_row_once_with_little_padding():
    lengths = torch.randint(4, 42, (3000,), generator=torch.Generator().manual_seed(0))
    first = length_grouped_batches(lengths, 64, torch.Generator().manual_seed(1))
    rows = torch.cat(first)
    assert sorted(rows.tolist()) == list(range(3000)) and len(first) == math.ceil(3000 / 64)
    padded = sum(len(b) * int(lengths[b].max()) for b in first)
    # Random batches of 64 pad to about the maximum length; grouped ones to about their own.
    random_padded = sum(64 * int(lengths[b].max()) for b in torch.randperm(3000).split(64))
    assert int(lengths.sum()) / padded > 0.9 > 0.7 > int(lengths.sum()) / random_padded
    # The next epoch groups other rows together, in another order.
    second = length_grouped_batches(lengths, 64, torch.Generator().manual_seed(2))
    assert {tuple(sorted(b.tolist())) for b in first} != {tuple(sorted(b.tolist())) for b in second}

"""The GPT-2 fast decoder against the model's own forward, and the fused Adam against
the per-parameter loop."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from rlhflab.models.decoding import GPT2Decoder, HFCacheDecoder, decoder_for
from rlhflab.models.optim import adam
from test_models import EOS, PAD, left_padded_prompts, tiny_gpt2, tiny_llama


def gpt2_variant(**overrides):
    torch.manual_seed(3)
    config = GPT2Config(vocab_size=40, n_positions=48, n_embd=32, n_layer=3, n_head=4, bos_token_id=1,
                        eos_token_id=EOS, pad_token_id=PAD, **overrides)
    return GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("overrides", [{}, {"activation_function": "gelu_pytorch_tanh"},
                                       {"scale_attn_by_inverse_layer_idx": True, "n_inner": 48}])
@torch.no_grad()
def test_gpt2_decoder_logits_equal_the_models_own_cache_path(overrides):
    model = gpt2_variant(**overrides)
    prompt_ids, prompt_mask = left_padded_prompts([2, 6, 3, 5, 2])
    fast, reference = GPT2Decoder(model, 5, 6 + 7), HFCacheDecoder(model)
    torch.testing.assert_close(fast.prefill(prompt_ids, prompt_mask), reference.prefill(prompt_ids, prompt_mask),
                               atol=1e-5, rtol=0)
    g = torch.Generator().manual_seed(0)
    for _ in range(7):
        tokens = torch.randint(3, 40, (5,), generator=g)
        torch.testing.assert_close(fast.step(tokens), reference.step(tokens), atol=1e-5, rtol=0)


@torch.no_grad()
def test_gpt2_decoder_matches_an_unpadded_full_forward():
    """Second path: each row alone, no padding, no cache, the whole sequence at once."""
    model = tiny_gpt2()
    prompt_ids, prompt_mask = left_padded_prompts([2, 5, 4])
    decoder = GPT2Decoder(model, 3, 5 + 4)
    logits = [decoder.prefill(prompt_ids, prompt_mask)]
    fed = torch.tensor([[5, 6, 7], [8, 9, 10], [11, 12, 13]])  # (B, steps)
    for step in range(3):
        logits.append(decoder.step(fed[:, step]))
    for row in range(3):
        sequence = torch.cat([prompt_ids[row][prompt_mask[row]], fed[row]])
        full = model(input_ids=sequence[None]).logits[0]
        n = int(prompt_mask[row].sum())
        for step, got in enumerate(logits):
            torch.testing.assert_close(got[row], full[n - 1 + step], atol=1e-5, rtol=0)


def test_other_models_and_train_mode_use_their_own_forward():
    assert isinstance(decoder_for(tiny_gpt2(), 2, 8), GPT2Decoder)
    assert isinstance(decoder_for(tiny_llama(), 2, 8), HFCacheDecoder)
    assert isinstance(decoder_for(tiny_gpt2().train(), 2, 8), HFCacheDecoder)  # dropout semantics are HF's
    wrapped = torch.nn.Sequential(tiny_gpt2())
    assert isinstance(decoder_for(wrapped, 2, 8), HFCacheDecoder)


def test_fused_adam_takes_the_same_steps_as_the_loop():
    torch.manual_seed(0)
    weights = [torch.randn(7, 5, requires_grad=True), torch.randn(5, requires_grad=True)]
    copies = [w.detach().clone().requires_grad_(True) for w in weights]
    fused, loop = adam(weights, lr=1e-2, eps=1e-5), torch.optim.Adam(copies, lr=1e-2, eps=1e-5)
    assert fused.defaults["fused"] and not loop.defaults.get("fused")
    for _ in range(5):
        for params, opt in ((weights, fused), (copies, loop)):
            opt.zero_grad()
            ((params[0].sin() @ params[1]) ** 2).sum().backward()
            opt.step()
    for a, b in zip(weights, copies):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)

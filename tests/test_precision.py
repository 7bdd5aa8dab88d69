"""bf16 autocast of the forwards (on CUDA in real runs), exercised here on the CPU by
adding it to the bf16 device types: outputs are fp32, close to the fp32 ones, and a
PPO loss backpropagates to fp32 gradients."""

import torch

import rlhflab.models.precision as precision
from rlhflab.data.batching import join_prompt_response
from rlhflab.models.forward import response_logits
from rlhflab.models.sampling import sample_responses
from rlhflab.models.value_head import PolicyWithValue
from rlhflab.ppo.losses import logprobs_from_logits, policy_loss
from test_models import EOS, PAD, left_padded_prompts, tiny_gpt2


def test_cpu_stays_fp32_by_default():
    assert precision.BF16_DEVICES == ("cuda",)
    assert not torch.is_autocast_enabled("cpu")
    with precision.autocast(torch.device("cpu")):
        assert not torch.is_autocast_enabled("cpu")


def test_bf16_forwards_give_fp32_outputs_near_the_fp32_ones(monkeypatch):
    model = tiny_gpt2()
    prompt_ids, prompt_mask = left_padded_prompts([3, 5, 2])
    s = sample_responses(model, prompt_ids, prompt_mask, 6, 1.0, EOS, PAD, torch.Generator().manual_seed(0))
    ids, mask = join_prompt_response(prompt_ids, prompt_mask, s.response_ids, s.mask)
    with torch.no_grad():
        fp32, _ = response_logits(model, ids, mask, prompt_ids.shape[1], 1.0)
    monkeypatch.setattr(precision, "BF16_DEVICES", ("cpu", "cuda"))
    with torch.no_grad():
        bf16, _ = response_logits(model, ids, mask, prompt_ids.shape[1], 1.0)
        sampled = sample_responses(model, prompt_ids, prompt_mask, 6, 1.0, EOS, PAD, torch.Generator().manual_seed(0))
    assert bf16.dtype == torch.float32 and sampled.logprobs.dtype == torch.float32
    assert not torch.equal(bf16, fp32)  # autocast was on
    torch.testing.assert_close(bf16, fp32, atol=5e-2, rtol=0)

    policy = PolicyWithValue(model)
    logits, values = policy(ids, mask, prompt_ids.shape[1], 1.0)
    logprobs = logprobs_from_logits(logits, s.response_ids)
    loss, _ = policy_loss(logprobs, logprobs.detach(), torch.ones_like(logprobs), s.mask, 0.2)
    (loss + values.square().mean()).backward()
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)

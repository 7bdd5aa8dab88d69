"""LoRA through peft: a smoke PPO run with adapters, the reference as the policy with its
adapters off (no second copy), the saved merged and peft directories, checkpoints of the
trained parameters only, and the checkup on the run; the memory savers' keys."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from typer.testing import CliRunner

from rlhflab.checkpoint import load_checkpoint
from rlhflab.cli import app
from rlhflab.config import load_config, save_config
from rlhflab.models import precision
from rlhflab.models.blocks import checkpoint_blocks
from rlhflab.models.forward import response_logprobs
from rlhflab.models.lm import load_causal_lm
from rlhflab.models.lora import ADAPTER_DIR, AdaptersOff
from rlhflab.pipeline import run_pipeline
from rlhflab.ppo.components import PPOComponents
from rlhflab.ppo.run import run_ppo
from rlhflab.ppo.state import load_ppo_state
from rlhflab.runs import RunDir, read_jsonl
from test_models import VOCAB, tiny_gpt2, tiny_llama

LORA = ["lora.rank=4", "lora.alpha=8", "ppo.iterations=6", "ppo.checkpoint_every=3", "ppo.lr=3e-3"]


def ppo_only_copy(source: RunDir, target: Path) -> RunDir:
    run = RunDir(target).create()
    for stage in ("stage1_lm", "stage2_rm"):
        shutil.copytree(source.root / stage, run.root / stage)
    return run


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """The smoke pipeline end to end with LoRA on the policy (and the doctor and report after)."""
    config = load_config("smoke", overrides=LORA)
    result = run_pipeline(config, tmp_path_factory.mktemp("lora") / "run", show_progress=False)
    return result.run, config


def unique_parameters(*modules) -> int:
    seen = {}
    for module in modules:
        for p in module.parameters():
            seen[p.untyped_storage().data_ptr()] = p.numel()
    return sum(seen.values())


def test_the_reference_is_the_policy_with_its_adapters_off(smoke_run):
    config = load_config("smoke", overrides=LORA)
    state = load_ppo_state(config, smoke_run, PPOComponents())
    assert isinstance(state.policy.lm, PeftModel) and isinstance(state.reference, AdaptersOff)
    trainable = [n for n, p in state.policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or n.startswith("value_head.") for n in trainable)
    # No second copy: under LoRA the policy and reference hold one model's weights (plus the
    # adapters and the value head); fully fine-tuned, two.
    full = load_ppo_state(load_config("smoke"), smoke_run, PPOComponents())
    lora_held, full_held = unique_parameters(state.policy, state.reference), unique_parameters(full.policy, full.reference)
    base = sum(p.numel() for p in full.reference.parameters())
    assert full_held > 1.99 * base and lora_held < 1.1 * base
    # Moved adapters change the policy, not the reference: the stage-1 model's logprobs, loaded again.
    with torch.no_grad():
        for name, p in state.policy.lm.named_parameters():
            if "lora_B" in name:
                p.add_(0.05)
    ids = torch.tensor([[1, 5, 9, 12, 7, 3, 2]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    stage1 = load_causal_lm(smoke_run.stage1_lm).eval()
    with torch.no_grad():
        ref = response_logprobs(state.reference, ids, mask, 3, 1.0)
        again = response_logprobs(stage1, ids, mask, 3, 1.0)
        policy = response_logprobs(state.policy.lm, ids, mask, 3, 1.0)
    assert torch.allclose(ref, again, atol=1e-5)
    assert not torch.allclose(policy, again, atol=1e-3)


def test_a_lora_run_trains_adapters_and_saves_merged_and_peft_directories(lora_run, smoke_run):
    run, config = lora_run
    records = read_jsonl(run.metrics("ppo"))
    assert [r["step"] for r in records] == list(range(6))
    assert records[-1]["kl/mean"] > 0  # the adapters moved the policy away from the reference
    saved = run.stage3_policy
    assert (saved / ADAPTER_DIR / "adapter_config.json").is_file()
    assert (saved / ADAPTER_DIR / "adapter_model.safetensors").is_file()
    assert json.loads((saved / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]
    # Second path: the merged weights and base + adapter give the same logprobs.
    merged = load_causal_lm(saved).eval()
    adapted = PeftModel.from_pretrained(load_causal_lm(run.stage1_lm), str(saved / ADAPTER_DIR)).eval()
    ids = torch.tensor([[1, 5, 9, 12, 7, 3, 2], [1, 8, 4, 6, 11, 2, 0]])
    mask = torch.tensor([[True] * 7, [True] * 6 + [False]])
    with torch.no_grad():
        a = response_logprobs(merged, ids, mask, 3, 1.0)
        b = response_logprobs(adapted, ids, mask, 3, 1.0)
        before = response_logprobs(load_causal_lm(run.stage1_lm).eval(), ids, mask, 3, 1.0)
    assert torch.allclose(a, b, atol=1e-4)
    assert not torch.allclose(a, before, atol=1e-3)


def test_a_lora_checkpoint_holds_the_adapters_and_resumes(lora_run, smoke_run):
    run, config = lora_run
    from torch.distributed.checkpoint import FileSystemReader

    saved = [k for k in FileSystemReader(str(run.checkpoints / "ppo" / "weights")).read_metadata().state_dict_metadata
             if k.startswith("model.")]
    # The adapters and the value head, not the frozen blocks (DCP keeps GPT-2's output matrix,
    # tied to the frozen embeddings, under its own name: the one frozen tensor it writes).
    frozen = [k for k in saved if "lora_" not in k and ".value_head." not in k and not k.endswith("lm_head.weight")]
    assert frozen == [] and any("lora_A" in k for k in saved)
    state = load_ppo_state(config, run, PPOComponents())
    point = load_checkpoint(run.checkpoints / "ppo", state.policy, state.optimizer, state.controller)
    assert point.next_step == 6
    steps = {int(s["step"]) for slots in state.optimizer.state.values() for s in [slots]}
    assert steps == {6 * config.ppo.epochs * config.ppo.minibatches}


def test_the_doctor_and_verify_read_a_lora_run(lora_run, tmp_path):
    run, _ = lora_run
    assert json.loads(run.diagnosis.read_text())["steps"] == 6 and run.report.is_file()
    copy = tmp_path / "copy"
    shutil.copytree(run.root, copy)
    result = CliRunner().invoke(app, ["verify", str(copy), "--fix", "ppo.kl_coef=0.1"])
    assert result.exit_code in (0, 1, 3), result.output
    rerun = tmp_path / "copy-verify"
    assert (rerun / "stage3_policy" / ADAPTER_DIR / "adapter_config.json").is_file()
    assert json.loads((copy / "verify.json").read_text())["verdict"]


def test_the_checkup_reads_a_lora_run(lora_run, tmp_path):
    run, _ = lora_run
    copy = tmp_path / "copy"
    shutil.copytree(run.root, copy)
    result = CliRunner().invoke(app, ["checkup", str(copy)])
    assert result.exit_code in (0, 1), result.output
    checkup = json.loads((copy / "checkup.json").read_text())
    assert "checkpoint" in checkup["states"]["moved"]
    failed = [p["name"] for p in checkup["probes"] if p.get("passed") is False]
    assert failed == [], failed


@pytest.mark.parametrize("make_model", [tiny_gpt2, tiny_llama])
def test_activation_checkpointing_gives_the_same_gradients(make_model):
    """Second path: the same model without checkpointing; in eval mode, as PPO trains."""
    torch.manual_seed(0)
    plain = make_model().eval()
    checkpointed = make_model().eval()
    checkpointed.load_state_dict(plain.state_dict())
    assert checkpoint_blocks(checkpointed) >= 2
    assert set(checkpointed.state_dict()) == set(plain.state_dict())  # names unchanged
    ids = torch.randint(3, VOCAB, (3, 9))
    mask = torch.ones_like(ids, dtype=torch.bool)
    for model in (plain, checkpointed):
        response_logprobs(model, ids, mask, 4, 1.0).sum().backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), checkpointed.named_parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


def test_bf16_follows_its_key(monkeypatch):
    cpu = torch.device("cpu")
    try:
        precision.use_bf16("on")
        assert precision.autocast(cpu).fast_dtype == torch.bfloat16 and precision.bf16_on(cpu)
        precision.use_bf16("off")
        monkeypatch.setattr(precision, "BF16_DEVICES", ("cpu", "cuda"))
        assert not precision.bf16_on(cpu)
        precision.use_bf16("auto")
        assert precision.bf16_on(cpu)  # auto: on where bf16 helps (CUDA; here the CPU, patched)
        with pytest.raises(ValueError, match="expected auto, on or off"):
            precision.use_bf16("fp16")
    finally:
        precision.use_bf16("auto")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_lora_under_two_processes_follows_one(strategy, lora_run, smoke_run, tmp_path):
    from test_multiprocess import close, torchrun

    _, config = lora_run
    run = ppo_only_copy(smoke_run, tmp_path / strategy)
    save_config(config, run.config)
    torchrun("ppo", "--resume", str(run.root), "--quiet", f"distributed.strategy={strategy}")
    one, two = read_jsonl(lora_run[0].metrics("ppo")), read_jsonl(run.metrics("ppo"))
    assert [r["step"] for r in two] == [r["step"] for r in one]
    assert one[0]["tokens/generated"] == two[0]["tokens/generated"]
    for key in ("reward/proxy_mean", "policy/loss", "value/loss", "policy/grad_norm", "policy/approxkl"):
        assert close(one[0][key], two[0][key]), (key, one[0][key], two[0][key])
    assert (run.stage3_policy / ADAPTER_DIR / "adapter_model.safetensors").is_file()


def test_a_reward_model_trained_through_adapters_is_saved_merged(smoke_run, tmp_path):
    """Second path: the saved (merged) model's scores on the training comparisons against the
    score mean the adapted model recorded in its config."""
    from rlhflab.models.lm import load_tokenizer
    from rlhflab.models.reward_model import load_reward_model
    from rlhflab.stages.reward import group_scores, run_reward, world_comparisons

    run = RunDir(tmp_path / "rm").create()
    shutil.copytree(smoke_run.stage1_lm, run.stage1_lm)
    config = load_config("smoke", overrides=["lora.rank=8", "lora.alpha=16", "lora.reward_model=true",
                                             "reward.pairs=2400", "reward.val_pairs=300", "reward.gold_pairs=300",
                                             "reward.lr=5e-3"])
    result = run_reward(config, run, show_progress=False)
    merged = load_reward_model(run.stage2_rm).eval()
    weights = merged.state_dict()
    assert not any("lora" in key for key in weights)
    stage1 = load_causal_lm(smoke_run.stage1_lm).state_dict()
    # The adapted projections moved; the others are the stage-1 trunk's.
    assert not torch.equal(weights["transformer.h.0.attn.c_attn.weight"], stage1["transformer.h.0.attn.c_attn.weight"])
    assert torch.equal(weights["transformer.h.0.mlp.c_fc.weight"], stage1["transformer.h.0.mlp.c_fc.weight"])
    train, _, _ = world_comparisons(config, run, load_tokenizer(run.stage1_lm), torch.device("cpu"))
    scores = group_scores(merged, train).flatten()
    assert abs(float(scores.mean()) - result.reward_mean) < 1e-3 * max(1.0, abs(result.reward_mean))
    assert result.train_loss < 0.69  # it learned: below ln 2, the loss of a constant score


def test_a_critic_with_its_own_adapters_trains_apart_from_the_policy(smoke_run, tmp_path):
    config = load_config("smoke", overrides=[*LORA, "lora.critic=adapter"])
    state = load_ppo_state(config, smoke_run, PPOComponents())
    names = {n for n, p in state.policy.named_parameters() if p.requires_grad}
    assert any(".critic." in n for n in names) and any(".default." in n for n in names)
    ids = torch.tensor([[1, 5, 9, 12, 7, 3, 2], [1, 8, 4, 6, 11, 2, 0]])
    mask = torch.tensor([[True] * 7, [True] * 6 + [False]])
    torch.nn.init.normal_(state.policy.value_head.weight, std=0.1)  # zero at the start: no gradient would pass
    logits, values = state.policy(ids, mask, 3, 1.0)
    values.sum().backward()  # a value loss
    grads = {n: p.grad for n, p in state.policy.named_parameters() if p.requires_grad}
    assert all(g is None or not g.any() for n, g in grads.items() if ".default." in n)
    assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "lora_B.critic" in n)  # A gets none yet: B = 0
    # Moving the critic's adapters moves the values, not the policy's logits.
    with torch.no_grad():
        for n, p in state.policy.named_parameters():
            if "lora_B.critic" in n:
                p.add_(0.1)
        after_logits, after_values = state.policy(ids, mask, 3, 1.0)
    assert torch.allclose(after_logits, logits.detach(), atol=1e-6)
    assert not torch.allclose(after_values, values.detach(), atol=1e-4)
    # A run saves the critic's adapter beside the policy's; the merged policy is the policy's alone.
    run = ppo_only_copy(smoke_run, tmp_path / "critic")
    short = load_config("smoke", overrides=[*LORA, "lora.critic=adapter", "ppo.iterations=2"])
    save_config(short, run.config)
    run_ppo(short, run, show_progress=False)
    assert (run.stage3_policy / ADAPTER_DIR / "critic" / "adapter_config.json").is_file()


@pytest.mark.slow
def test_a_critic_with_its_own_adapters_runs_under_fsdp2(smoke_run, tmp_path):
    from test_multiprocess import torchrun

    run = ppo_only_copy(smoke_run, tmp_path / "critic-fsdp2")
    save_config(load_config("smoke", overrides=[*LORA, "lora.critic=adapter", "ppo.iterations=3"]), run.config)
    torchrun("ppo", "--resume", str(run.root), "--quiet", "distributed.strategy=fsdp2")
    records = read_jsonl(run.metrics("ppo"))
    assert [r["step"] for r in records] == [0, 1, 2] and records[-1]["value/loss"] > 0
    assert (run.stage3_policy / ADAPTER_DIR / "critic" / "adapter_model.safetensors").is_file()

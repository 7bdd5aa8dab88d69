"""The vLLM rollout sampler (`rollout.engine = "vllm"`), in the venv that has vLLM
(`make test-vllm`; skipped elsewhere): it samples the policy's distribution, its pushed
weights are the ones it samples, and the mismatch rlhflab logs is float noise while the
weights are synced and grows when a sync is skipped."""

from __future__ import annotations

import copy
import os
from dataclasses import replace

import pytest
import torch

if os.environ.get("RLHFLAB_REQUIRE_VLLM"):  # `make test-vllm`: a broken install must fail, not skip
    import scipy.stats as stats
    import vllm  # noqa: F401
else:
    pytest.importorskip("vllm")
    stats = pytest.importorskip("scipy.stats")

from rlhflab.config import RolloutConfig, load_config  # noqa: E402
from rlhflab.models.sampling import sample_responses  # noqa: E402
from rlhflab.models.vllm_sampler import VLLMSampler  # noqa: E402
from rlhflab.ppo.components import PPOComponents  # noqa: E402
from rlhflab.ppo.state import load_ppo_state  # noqa: E402
from rlhflab.ppo.trainer import ppo_iteration  # noqa: E402
from rlhflab.runs import RunDir, read_jsonl  # noqa: E402
from rlhflab.seeding import RowStreams, derive_seed  # noqa: E402
from rlhflab.worlds.reviews import ReviewsWorld  # noqa: E402

CPU = torch.device("cpu")
EOS, PAD = 2, 0
# vLLM's CPU attention kernels take head sizes 32 and 64, not the smoke model's 16.
ENGINE_SIZED = ["pretrain.n_head=2"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A random GPT-2 (64 tokens, head size 32) saved as an HF directory, and the model."""
    from transformers import GPT2Config, GPT2LMHeadModel

    directory = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=64, n_embd=128, n_layer=2, n_head=4, bos_token_id=1,
                        eos_token_id=EOS, pad_token_id=PAD)
    model = GPT2LMHeadModel(config).eval()
    model.save_pretrained(directory)
    return directory, model


@pytest.fixture(scope="module")
def engine(tiny_model):
    sampler = VLLMSampler(tiny_model[0], RolloutConfig(engine="vllm"), seed=0, device=CPU)
    yield sampler
    sampler.close()


def prompts(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`rows` copies of the prompt `<bos> 5` (left-padded form with nothing to pad)."""
    return torch.tensor([[1, 5]] * rows), torch.ones(rows, 2, dtype=torch.bool)


def first_token_counts(sampler, model, rows: int, temperature: float, name: str) -> torch.Tensor:
    ids, mask = prompts(rows)
    samples = sampler(model, ids, mask, 1, temperature, EOS, PAD, RowStreams(0, (name,), list(range(rows))))
    return torch.bincount(samples.response_ids[:, 0], minlength=64)


def test_engine_and_native_sampler_draw_the_models_distribution(tiny_model, engine):
    """Chi-square goodness of fit of 4000 first tokens at T = 0.8, from vLLM and from the
    native sampler, against softmax(logits / T) of the HF model (cells under 5 expected
    pooled); and a two-sample test of the two samplers' counts against each other."""
    _, model = tiny_model
    temperature, rows = 0.8, 4000
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([[1, 5]])).logits[0, -1].double() / temperature, -1)
    counts = {"vllm": first_token_counts(engine, model, rows, temperature, "vllm"),
              "native": first_token_counts(sample_responses, model, rows, temperature, "native")}
    expected = probs * rows
    big = expected >= 5
    for name, observed in counts.items():
        obs, exp = observed[big].double(), expected[big]
        if not big.all():
            obs = torch.cat([obs, observed[~big].sum().double()[None]])
            exp = torch.cat([exp, expected[~big].sum()[None]])
        p_value = stats.chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()).pvalue
        assert p_value > 1e-3, f"{name}: first tokens do not follow the model's distribution (p = {p_value:.2g})"
    table = torch.stack([counts["vllm"], counts["native"]])[:, (counts["vllm"] + counts["native"]) > 0]
    assert stats.chi2_contingency(table.numpy()).pvalue > 1e-3


def test_engine_logprobs_are_the_training_forwards(tiny_model, engine):
    """Every token of 32 sampled responses (up to 20 tokens, T = 0.7): the engine's logprob
    equals the HF forward's log softmax(logits / T) of the same token (float32 noise)."""
    _, model = tiny_model
    ids, mask = prompts(32)
    samples = engine(model, ids, mask, 20, 0.7, EOS, PAD, RowStreams(1, ("logprobs",), list(range(32))))
    full = torch.cat([ids, samples.response_ids], 1)
    with torch.no_grad():
        logits = model(full).logits[:, ids.shape[1] - 1 : -1].float() / 0.7
    trainer = torch.log_softmax(logits, -1).gather(2, samples.response_ids[..., None])[..., 0]
    gap = (trainer - samples.logprobs).abs()[samples.mask]
    assert samples.mask.sum() > 100
    assert float(gap.max()) < 1e-4
    # EOS ends a response and stays in its mask; nothing after it is real.
    ended = samples.has_eos.nonzero()[:, 0].tolist()
    for row in ended:
        length = int(samples.mask[row].sum())
        assert samples.response_ids[row, length - 1] == EOS
        assert (samples.response_ids[row, length:] == PAD).all()


def test_pushed_weights_are_sampled_and_restoring_them_restores_the_samples(tiny_model, engine):
    _, model = tiny_model
    ids, mask = prompts(32)

    def draw():
        streams = RowStreams(2, ("push",), list(range(32)))
        return engine(model, ids, mask, 12, 1.0, EOS, PAD, streams).response_ids

    before = draw()
    assert torch.equal(draw(), before)  # one seed per row: the same draw twice
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    engine.push(moved)
    after = draw()
    changed = sum(not torch.equal(a, b) for a, b in zip(before, after))
    assert changed >= 24, f"only {changed}/32 responses changed after new weights were pushed"
    engine.push(model)
    assert torch.equal(draw(), before)


@pytest.fixture(scope="module")
def engine_run(tmp_path_factory):
    """The smoke pipeline with vLLM sampling stage 3 (a model whose head size vLLM takes)."""
    from rlhflab.pipeline import run_pipeline

    config = load_config("smoke", overrides=ENGINE_SIZED + ["rollout.engine=vllm"])
    return run_pipeline(config, tmp_path_factory.mktemp("vllm") / "run", show_progress=False).run


def test_pipeline_runs_on_the_engine_and_its_mismatch_is_float_noise(engine_run):
    """Every iteration of a run synced after each update: the engine's logprobs are the
    trainer's to float32 noise (mean gap < 1e-5 nats; the native sampler's is ~5e-7)."""
    rows = read_jsonl(engine_run.metrics("ppo"))
    assert {"mismatch/logp_abs_diff", "mismatch/kl", "mismatch/is_ratio_mean", "time/sync_s"} <= rows[0].keys()
    for row in rows:
        assert row["mismatch/logp_abs_diff"] < 1e-5, row
        assert abs(row["mismatch/is_ratio_mean"] - 1) < 1e-4
    # The policy moved away from the stage-1 weights (its KL), and the engine's logprobs
    # followed it to float noise (above): the pushes took.
    assert rows[-1]["kl/mean"] > 0.1
    assert (engine_run.stage3_policy / "config.json").is_file()


class SkippedSync:
    """The engine of a run whose weight sync does not take: it keeps sampling the stage-1 weights."""

    def __init__(self, sampler) -> None:
        self.sampler, self.is_trainer = sampler, sampler.is_trainer

    def __call__(self, *args, **kwargs):
        return self.sampler(*args, **kwargs)

    def push(self, lm) -> None:
        pass

    def close(self) -> None:
        self.sampler.close()


def iterate(run: RunDir, skip_sync: bool, iterations: int) -> list[float]:
    config = load_config("smoke", overrides=ENGINE_SIZED + ["rollout.engine=vllm"])
    state = load_ppo_state(config, run, PPOComponents())
    engine = state.sampler
    if skip_sync:
        state = replace(state, sampler=SkippedSync(engine))
    world = ReviewsWorld(config.world)
    gaps = []
    try:
        for step in range(iterations):
            prompts_ = world.prompts(config.ppo.batch_size, derive_seed(0, "test-prompts", str(step)))
            _, metrics = ppo_iteration(state, prompts_, 0, step)
            gaps.append(metrics["mismatch/logp_abs_diff"])
    finally:
        engine.close()
    return gaps


def test_mismatch_grows_when_the_sync_is_skipped(engine_run):
    synced = iterate(engine_run, skip_sync=False, iterations=6)
    skipped = iterate(engine_run, skip_sync=True, iterations=6)
    assert max(synced) < 1e-5
    assert skipped[0] < 1e-5  # the first rollout is on the weights the engine started with
    assert skipped[-1] > 1e-3 and skipped[-1] > 100 * max(synced)


def test_two_processes_each_drive_an_engine_of_their_own(engine_run, tmp_path):
    """Under torchrun every process samples its share of the rows with an engine of its own
    (vLLM's external launcher), each pushed its process's weights: the gathered batch's
    mismatch is float noise, and the run exits cleanly (the engines close before the group)."""
    import shutil
    import subprocess
    import sys

    run = tmp_path / "two"
    run.mkdir()
    for stage in ("stage1_lm", "stage2_rm"):
        shutil.copytree(engine_run.root / stage, run / stage)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "rlhflab.cli",
         "ppo", "--out", str(run), "--preset", "smoke", "--quiet", *ENGINE_SIZED, "rollout.engine=vllm",
         "ppo.iterations=3", "ppo.eval_prompts=16"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    rows = read_jsonl(RunDir(run).metrics("ppo"))
    # Each process's engine followed its trainer's weights after every update (float noise).
    assert len(rows) == 3 and all(r["mismatch/logp_abs_diff"] < 1e-5 for r in rows)


def test_the_checkup_passes_on_a_run_sampled_by_the_engine(engine_run):
    """Every invariant probe holds with the engine sampling, at the start and at the run's
    checkpoint: the checkpoint's weights are pushed to the engine before its probes sample."""
    from rlhflab.checkup.probes import run_checkup
    from rlhflab.config import config_from_run

    results = run_checkup(config_from_run(engine_run.root), engine_run).results
    failed = [(r.name, r.state, r.measured) for r in results if not r.passed]
    assert not failed
    assert {r.state for r in results if r.name == "sampled_logprobs_match_training_forward"} == {"start", "moved"}

"""Stage 1's training loop watched from inside, through its objective component: what each
step feeds the objective, with what weight the step's loss reaches the gradient, and what
the optimiser did with the step before. Held against what the loop must do: every text
once per pass over the corpus, passes in new orders, no row cut, every target token
weighing the same whatever batch it falls in, each step's own gradient only (clipped at
`pretrain.max_grad_norm`), and the first step at the logged rate."""

import math
from collections import Counter

import pytest
import torch

from rlhflab.config import load_config
from rlhflab.data.batching import encode_sft
from rlhflab.models.lm import load_causal_lm
from rlhflab.models.lm_loss import lm_loss
from rlhflab.models.sampling import sample_share
from rlhflab.ppo.components import PPOComponents
from rlhflab.runs import RunDir, read_jsonl
from rlhflab.sources import context_length, sft_data, stage1_tokenizer
from rlhflab.stages.pretrain import lr_at, run_pretrain

OVERRIDES = {"pretrain.steps": 13, "pretrain.corpus_size": 80, "pretrain.val_size": 16, "pretrain.batch_size": 16,
             "pretrain.eval_every": 5, "pretrain.eval_samples": 4, "pretrain.warmup_steps": 2,
             "pretrain.n_layer": 1, "pretrain.n_embd": 32, "pretrain.n_head": 2, "pretrain.max_grad_norm": 0.5,
             "pretrain.weight_decay": 0.0, "pretrain.dropout": 0.1}


class Watched:
    """The default objective, recording each call: the rows, the weights and gradients the
    model holds when it is called (the previous step's), the weight the loss enters the
    backward with, and the gradient the previous step's loss should have left."""

    def __init__(self):
        self.calls, self.validation_modes = [], []

    def __call__(self, model, ids, mask, targets):
        self.model = model
        if not torch.is_grad_enabled():  # the validation loss, not a step
            self.validation_modes.append(model.training)
            return lm_loss(model, ids, mask, targets)
        params = [p for p in model.parameters() if p.requires_grad]
        call = {"rows": [tuple(r[m].tolist()) for r, m in zip(ids, mask)],
                "weights": [p.detach().clone() for p in params],
                "grads": [None if p.grad is None else p.grad.detach().clone() for p in params],
                "tokens": int(targets[:, 1:].sum()), "training": model.training}
        loss = lm_loss(model, ids, mask, targets)
        # the gradient of this step's loss alone, by a second backward: what the step must apply
        call["own_grads"] = [g.detach().clone() for g in torch.autograd.grad(loss, params, retain_graph=True)]
        loss.register_hook(lambda g: call.__setitem__("weight", float(g)))
        self.calls.append(call)
        return loss


@pytest.fixture(scope="module")
def watched_stage1(tmp_path_factory, monkeypatch_module):
    import rlhflab.stages.pretrain as pretrain_stage

    config = load_config("smoke", overrides=OVERRIDES)
    run = RunDir(tmp_path_factory.mktemp("stage1") / "run")
    run.create()
    objective = Watched()
    sampled = []  # the models the grammaticality samples come from, and their mode

    def recording_share(sample, lm, *args, **kwargs):
        sampled.append((lm, lm.training))
        return sample_share(sample, lm, *args, **kwargs)

    monkeypatch_module.setattr(pretrain_stage, "sample_share", recording_share)
    run_pretrain(config, run, show_progress=False, components=PPOComponents(lm_loss=objective))
    # the grammatical rate logged with each validation is of samples of the model being trained, dropout off
    logged = [r for r in read_jsonl(run.metrics("pretrain")) if "lm/grammatical_rate" in r]
    assert len(sampled) == len(logged) > 1 and all(lm is objective.model and not training for lm, training in sampled)
    tokenizer = stage1_tokenizer(config)
    context = context_length(None, config)
    ids, mask, targets = encode_sft(tokenizer, sft_data(config, tokenizer, context).train, context)
    corpus = [tuple(r[m].tolist()) for r, m in zip(ids, mask)]
    assert objective.validation_modes and not any(objective.validation_modes)  # dropout off to validate
    return config, run, objective.calls, corpus, int(targets[:, 1:].sum())


def test_every_text_once_per_pass_whole_and_each_pass_in_a_new_order(watched_stage1):
    config, _, calls, corpus, _ = watched_stage1
    per_pass = math.ceil(len(corpus) / config.pretrain.batch_size)
    passes = [[row for call in calls[i:i + per_pass] for row in call["rows"]] for i in range(0, len(calls), per_pass)]
    assert all(call["training"] for call in calls)  # dropout on in every step
    for seen in passes[:-1]:  # whole passes: every text once, every token of it (no row cut)
        assert Counter(seen) == Counter(corpus)
    assert Counter(passes[-1]) <= Counter(corpus)
    assert passes[0] != passes[1][: len(passes[0])]


def test_every_target_token_weighs_the_same_whatever_batch_it_falls_in(watched_stage1):
    config, _, calls, corpus, total_tokens = watched_stage1
    per_batch = total_tokens * config.pretrain.batch_size / len(corpus)
    for call in calls:  # a batch's mean loss enters the gradient weighted by its share of the tokens
        assert math.isclose(call["weight"], call["tokens"] / per_batch, rel_tol=1e-5)


def test_each_step_applies_its_own_clipped_gradient_and_the_first_at_the_logged_rate(watched_stage1):
    config, run, calls, _, _ = watched_stage1
    clip = config.pretrain.max_grad_norm
    for before, after in zip(calls, calls[1:]):
        # what the model holds when the next step begins: this step's gradient, weighted and clipped
        own = [g * before["weight"] for g in before["own_grads"]]
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in own])))
        scale = min(1.0, clip / (norm + 1e-6))
        for held, expected in zip(after["grads"], own):
            torch.testing.assert_close(held, expected * scale, rtol=1e-4, atol=1e-7)
    # Adam's first step moves each weight by the rate times sign(gradient) (no decay here)
    moved = torch.cat([(a - b).flatten() for a, b in zip(calls[1]["weights"], calls[0]["weights"])])
    gradient = torch.cat([g.flatten() for g in calls[1]["grads"]])
    big = gradient.abs() > 1e-4  # where Adam's epsilon is negligible
    rate = float(moved[big].abs().median())
    logged = read_jsonl(run.metrics("pretrain"))[0]["lr"]
    assert math.isclose(rate, logged, rel_tol=1e-3) and logged == lr_at(0, config.pretrain)
    assert bool((torch.sign(moved[big]) == -torch.sign(gradient[big])).all())


# --- stage 2 -------------------------------------------------------------------------------------
REWARD = {"reward.pairs": 96, "reward.val_pairs": 24, "reward.gold_pairs": 24, "reward.batch_size": 4,
          "reward.epochs": 2, "reward.response_length": 12}


@pytest.fixture(scope="module")
def watched_stage2(watched_stage1, monkeypatch_module):
    """Stage 2 on the stage-1 model above, its scorer recording every training forward's rows
    and its batching component every epoch's order."""
    import rlhflab.stages.reward as reward_stage
    from rlhflab.models.lm import load_tokenizer
    from rlhflab.ppo.components import PPOComponents as Components

    _, run, _, _, _ = watched_stage1
    config = load_config("smoke", overrides=OVERRIDES | REWARD)
    forwards, epochs, modes = [], [], {True: [], False: []}

    class RecordingScorer(reward_stage.Scorer):
        def forward(self, input_ids, attention_mask):
            step = torch.is_grad_enabled()  # a training step's forward (the evaluation runs without grad)
            modes[step].append(self.model.training)
            if step:
                forwards.append((input_ids.detach().clone(), attention_mask.detach().clone()))
            return super().forward(input_ids, attention_mask)

    def batches(lengths, batch_size, generator):
        drawn = Components().reward_batches(lengths, batch_size, generator)
        epochs.append([b.tolist() for b in drawn])
        return drawn

    sampled = []

    def recording_share(sample, lm, *args, **kwargs):
        sampled.append(({k: v.clone() for k, v in lm.state_dict().items()}, lm.training))
        return sample_share(sample, lm, *args, **kwargs)

    monkeypatch_module.setattr(reward_stage, "Scorer", RecordingScorer)
    monkeypatch_module.setattr(reward_stage, "sample_share", recording_share)
    reward_stage.run_reward(config, run, show_progress=False, components=Components(reward_batches=batches))
    train, _, _ = reward_stage.world_comparisons(config, run, load_tokenizer(run.stage1_lm), torch.device("cpu"))
    # dropout (the stage-1 model's 0.1) on in every step, off in every evaluation and the final scores
    assert all(modes[True]) and modes[False] and not any(modes[False])
    # the comparisons' responses are samples of the saved stage-1 model, dropout off
    saved = load_causal_lm(run.stage1_lm).state_dict()
    assert sampled and all(not training and all(torch.equal(weights[k], saved[k]) for k in saved)
                           for weights, training in sampled)
    return config, train, forwards, epochs


@pytest.fixture(scope="module")
def monkeypatch_module():
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()


def test_each_reward_step_reads_its_batchs_rows_whole(watched_stage2):
    _, train, forwards, epochs = watched_stage2
    steps = [rows for epoch in epochs for rows in epoch]
    assert len(forwards) == len(steps)
    N, K, L = train.ids.shape
    for (ids, mask), rows in zip(forwards, steps):
        width = ids.shape[1]
        expected_ids, expected_mask = train.ids[rows].view(-1, L), train.mask[rows].view(-1, L)
        assert not expected_mask[:, width:].any()  # no real token cut
        assert torch.equal(mask, expected_mask[:, :width]) and torch.equal(ids, expected_ids[:, :width])


def test_each_reward_epoch_visits_every_prompt_once_in_a_new_order(watched_stage2):
    config, train, _, epochs = watched_stage2
    assert len(epochs) == config.reward.epochs
    orders = [[r for rows in epoch for r in rows] for epoch in epochs]
    assert all(sorted(order) == list(range(len(train))) for order in orders)
    assert orders[0] != orders[1]


def test_weight_decay_falls_on_the_matrices_only_and_every_trained_parameter_is_in_one_group():
    from rlhflab.models.lm import build_tiny_lm
    from rlhflab.stages.pretrain import decay_groups
    from rlhflab.worlds.reviews import ReviewsWorld

    config = load_config("smoke", overrides=OVERRIDES)
    model = build_tiny_lm(ReviewsWorld().tokenizer(), config.pretrain, 0)
    model.transformer.h[0].ln_1.weight.requires_grad_(False)  # a frozen parameter belongs to no group
    decay, plain = decay_groups(model, 0.1)
    assert (decay["weight_decay"], plain["weight_decay"]) == (0.1, 0.0)
    grouped = [id(p) for p in decay["params"] + plain["params"]]
    assert sorted(grouped) == sorted({id(p) for p in model.parameters() if p.requires_grad})
    names = {id(p): n for n, p in model.named_parameters()}
    for p in decay["params"]:
        assert p.ndim == 2 and not any(e in names[id(p)] for e in ("wte", "wpe"))
    for p in plain["params"]:  # biases, norms, embeddings
        assert p.ndim == 1 or any(e in names[id(p)] for e in ("wte", "wpe"))


def test_the_stop_signals_put_back_the_handlers_they_found():
    import signal

    from rlhflab.ppo.run import StopSignals

    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with StopSignals() as signals:
            assert signal.getsignal(signal.SIGTERM) is not mine
            signal.raise_signal(signal.SIGTERM)
            assert signals.received == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)

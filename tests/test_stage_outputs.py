"""What each stage saved reproduces what it logged, recomputed by a second path from the saved
model: stage 2's last held-out accuracy, gold agreement and length correlation, and the
score statistics stored with the reward model; stage 1's last validation loss. A stage loop
that logs one model and saves another, evaluates on other rows, or stores statistics of
other scores fails here. And the comparisons stage 2 learns from: each row is its prompt
and its response, scored by the world's gold, labelled over every pair, the gold pairs
from the held-out prompts."""

import json
import math
import statistics

import pytest
import torch

from rlhflab.config import load_config
from rlhflab.data.batching import encode_sft
from rlhflab.models.lm import load_causal_lm, load_tokenizer
from rlhflab.models.reward_model import load_reward_model, score_sequences
from rlhflab.runs import read_jsonl
from rlhflab.stages.reward import prompts_for, world_comparisons
from rlhflab.worlds.reviews import ReviewsWorld
from rlhflab.worlds.reviews.world import prompt_split

CONFIG = load_config("smoke")


def _last(records: list[dict], key: str) -> float:
    return [r[key] for r in records if key in r][-1]


@pytest.fixture(scope="module")
def comparisons(smoke_run):
    """Stage 2's comparisons again, from the saved stage-1 model and the run's seeds."""
    return world_comparisons(CONFIG, smoke_run, load_tokenizer(smoke_run.stage1_lm), torch.device("cpu"))


def _scores(model, c) -> list[list[float]]:
    """Each response scored alone, without padding: the second path to the stage's batches."""
    rows = []
    with torch.no_grad():
        for n in range(c.ids.shape[0]):
            row = []
            for k in range(c.ids.shape[1]):
                ids = c.ids[n, k][c.mask[n, k]].unsqueeze(0)
                row.append(float(score_sequences(model, ids, torch.ones_like(ids, dtype=torch.bool))))
            rows.append(row)
    return rows


def _batched_scores(model, c) -> list[float]:
    N, K, L = c.ids.shape
    with torch.no_grad():
        return torch.cat([score_sequences(model, ids, mask) for ids, mask in
                          zip(c.ids.view(N * K, L).split(512), c.mask.view(N * K, L).split(512))]).tolist()


def test_the_saved_reward_model_gives_the_logged_held_out_numbers_and_its_statistics(smoke_run, comparisons):
    train, val, gold = comparisons
    model = load_reward_model(smoke_run.stage2_rm).eval()
    logged = read_jsonl(smoke_run.metrics("reward"))

    val_scores = _scores(model, val)
    right = [val_scores[n][i] > val_scores[n][j] if val.first_preferred[n, c] else val_scores[n][j] > val_scores[n][i]
             for n in range(len(val)) for c, (i, j) in enumerate(val.pairs.tolist())]
    # scores alone and in padded batches differ by float rounding: a pair within it may turn
    assert abs(_last(logged, "rm/val_acc") - sum(right) / len(right)) <= 1.5 / len(right)

    gold_scores = _scores(model, gold)
    agree = [(gold_scores[n][i] > gold_scores[n][j]) == bool(gold.gold[n, i] > gold.gold[n, j])
             for n in range(len(gold)) for i, j in gold.pairs.tolist() if gold.gold[n, i] != gold.gold[n, j]]
    assert abs(_last(logged, "rm/gold_agreement") - sum(agree) / len(agree)) <= 1.5 / len(agree)
    flat = [s for row in gold_scores for s in row]
    lengths = [float(x) for x in gold.lengths.flatten()]
    assert math.isclose(_last(logged, "rm/length_corr"), statistics.correlation(flat, lengths), abs_tol=1e-4)

    train_scores = _batched_scores(model, train)  # a row's score in a batch is held by the padding probes
    assert math.isclose(model.config.reward_mean, statistics.fmean(train_scores), abs_tol=1e-4)
    assert math.isclose(model.config.reward_std, statistics.stdev(train_scores), rel_tol=1e-4)
    assert math.isclose(model.config.reward_min, min(train_scores), abs_tol=1e-4)
    assert math.isclose(model.config.reward_max, max(train_scores), abs_tol=1e-4)


def _texts(tokenizer, c, n: int, k: int) -> tuple[str, str]:
    """A comparison row read back: its prompt and its response, as text."""
    ids = c.ids[n, k][c.mask[n, k]].tolist()
    cut = len(ids) - int(c.lengths[n, k])
    return tuple(tokenizer.decode(part, skip_special_tokens=True).strip() for part in (ids[:cut], ids[cut:]))


def test_the_comparisons_are_prompt_and_response_rows_scored_by_gold_over_every_pair(comparisons):
    train, val, gold = comparisons
    world = ReviewsWorld(CONFIG.world)
    tokenizer = world.tokenizer()
    K = CONFIG.reward.responses_per_prompt
    n_train, n_val = prompts_for(CONFIG.reward.pairs, K), prompts_for(CONFIG.reward.val_pairs, K)
    assert (len(train), len(val), len(gold)) == (n_train, n_val, prompts_for(CONFIG.reward.gold_pairs, K))
    assert train.comparisons >= CONFIG.reward.pairs and val.comparisons >= CONFIG.reward.val_pairs
    assert train.pairs.tolist() == [[i, j] for i in range(K) for j in range(i + 1, K)]
    for c, split in ((train, "train"), (val, "train"), (gold, "heldout")):
        for n in range(len(c)):
            texts = [_texts(tokenizer, c, n, k) for k in range(K)]
            assert len({prompt for prompt, _ in texts}) == 1  # the K responses answer one prompt
            assert prompt_split(texts[0][0]) == split  # gold pairs from held-out prompts only
            for k in range(K):  # each row starts with <bos>, and the response ends at its EOS
                real = c.ids[n, k][c.mask[n, k]]
                assert real[0] == tokenizer.bos_token_id
                assert (real[-int(c.lengths[n, k]):-1] != tokenizer.eos_token_id).all()
        utilities = world.gold([p for n in range(len(c)) for p, _ in [_texts(tokenizer, c, n, k) for k in range(K)]],
                               [r for n in range(len(c)) for _, r in [_texts(tokenizer, c, n, k) for k in range(K)]])
        assert max(abs(u - float(g)) for u, g in zip(utilities, c.gold.flatten())) < 1e-6
    # the labels follow the gold order at the labeler's rate: more often than not, never always
    follows = [bool(train.first_preferred[n, c]) == bool(train.gold[n, i] > train.gold[n, j])
               for n in range(len(train)) for c, (i, j) in enumerate(train.pairs.tolist())
               if train.gold[n, i] != train.gold[n, j]]
    assert 0.6 < sum(follows) / len(follows) < 1.0


def test_the_saved_stage1_model_gives_the_logged_validation_loss(smoke_run):
    from rlhflab.sources import context_length, sft_data, stage1_tokenizer

    tokenizer = stage1_tokenizer(CONFIG)
    data = sft_data(CONFIG, tokenizer, context_length(None, CONFIG))
    ids, mask, targets = encode_sft(tokenizer, data.val, context_length(None, CONFIG))
    lm = load_causal_lm(smoke_run.stage1_lm).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for row in range(len(ids)):  # each text alone, token by token: the second path
            real = ids[row][mask[row]].unsqueeze(0)
            logprobs = torch.log_softmax(lm(input_ids=real).logits[0].double(), dim=-1)
            for position in range(1, real.shape[1]):
                if targets[row, position]:
                    total -= float(logprobs[position - 1, real[0, position]])
                    count += 1
    assert count == int(targets[:, 1:].sum()) and count > len(ids)
    logged = _last(read_jsonl(smoke_run.metrics("pretrain")), "lm/val_loss")
    assert math.isclose(logged, total / count, rel_tol=1e-5)


def test_stage2_logs_every_step_of_its_schedule_and_its_summary_is_its_last_line(smoke_run):
    """The steps 0..E*S-1 (E epochs of S = ceil(training prompts / batch) steps), the rate of
    each step the schedule's at that step, the held-out evaluation at the last step of each
    epoch with the epoch's number, and the summary's numbers the last line's."""
    from rlhflab.ppo.components import PPOComponents

    cfg = CONFIG.reward
    per_epoch = math.ceil(prompts_for(cfg.pairs, cfg.responses_per_prompt) / cfg.batch_size)
    logged = read_jsonl(smoke_run.metrics("reward"))
    assert [r["step"] for r in logged] == list(range(per_epoch * cfg.epochs))
    schedule = PPOComponents().reward_lr
    assert all(math.isclose(r["lr"], schedule(cfg.lr, r["step"], per_epoch, cfg.epochs), rel_tol=1e-12) for r in logged)
    evaluated = [(r["step"], r["epoch"]) for r in logged if "rm/val_acc" in r]
    assert evaluated == [((e + 1) * per_epoch - 1, e + 1) for e in range(cfg.epochs)]
    summary = json.loads(smoke_run.summary.read_text())["reward"]
    last = logged[-1]
    assert (summary["train_loss"], summary["train_acc"], summary["val_acc"], summary["gold_agreement"],
            summary["length_corr"]) == (last["rm/train_loss"], last["rm/train_acc"], last["rm/val_acc"],
                                        last["rm/gold_agreement"], last["rm/length_corr"])
    model = load_reward_model(smoke_run.stage2_rm)
    assert (summary["reward_mean"], summary["reward_std"]) == (model.config.reward_mean, model.config.reward_std)


def test_stage1_logs_every_step_and_its_summary_is_its_last_line(smoke_run):
    """The steps 0..steps-1, the rate of each the warm-up and cosine schedule's, the
    validation at every `eval_every` steps and the last, and the summary the last line's."""
    from rlhflab.stages.pretrain import lr_at

    cfg = CONFIG.pretrain
    logged = read_jsonl(smoke_run.metrics("pretrain"))
    assert [r["step"] for r in logged] == list(range(cfg.steps))
    peak = max(r["lr"] for r in logged)
    assert math.isclose(peak, cfg.lr, rel_tol=1e-9) and [r["lr"] for r in logged] == [lr_at(s, cfg) for s in range(cfg.steps)]
    assert math.isclose(logged[-1]["lr"], 0.1 * cfg.lr, rel_tol=1e-3)  # the cosine ends at 10% of the peak
    evaluated = [r["step"] for r in logged if "lm/val_loss" in r]
    assert evaluated == sorted({s for s in range(cfg.steps) if (s + 1) % cfg.eval_every == 0} | {cfg.steps - 1})
    assert all("lm/grammatical_rate" in r for r in logged if "lm/val_loss" in r)
    summary = json.loads(smoke_run.summary.read_text())["pretrain"]
    last = logged[-1]
    assert (summary["train_loss"], summary["val_loss"], summary["grammatical_rate"]) == (
        last["lm/train_loss"], last["lm/val_loss"], last["lm/grammatical_rate"])
    lm = load_causal_lm(smoke_run.stage1_lm)
    assert summary["parameters"] == sum(p.numel() for p in lm.parameters())


def test_ppo_logs_each_step_once_with_its_batch_and_the_gold_of_every_response(smoke_run):
    """With a batch no larger than `ppo.samples_per_iteration`, samples/ppo.jsonl holds the
    whole batch of every step: each response's gold is the world's for its own prompt, and
    the step's logged proxy, gold, EOS rate and prompts' uniqueness are those of its rows."""
    cfg = CONFIG.ppo
    assert cfg.batch_size <= cfg.samples_per_iteration
    world = ReviewsWorld(CONFIG.world)
    logged = read_jsonl(smoke_run.metrics("ppo"))
    samples = read_jsonl(smoke_run.samples("ppo"))
    assert [r["step"] for r in logged] == list(range(cfg.iterations))
    for record in logged:
        rows = [s for s in samples if s["step"] == record["step"]]
        assert len(rows) == cfg.batch_size
        gold = world.gold([s["prompt"] for s in rows], [s["response"] for s in rows])
        assert all(math.isclose(g, s["gold"], abs_tol=1e-12) for g, s in zip(gold, rows))
        assert math.isclose(record["reward/gold_mean"], statistics.fmean(gold), abs_tol=1e-9)
        assert math.isclose(record["reward/proxy_mean"], statistics.fmean(s["proxy"] for s in rows), abs_tol=1e-5)
        assert math.isclose(record["response/eos_rate"], statistics.fmean(s["ended"] for s in rows), abs_tol=1e-9)
        assert math.isclose(record["prompts/unique_frac"], len({s["prompt"] for s in rows}) / len(rows), abs_tol=1e-12)
        assert all(prompt_split(s["prompt"]) != "heldout" for s in rows)


def test_the_evaluation_summary_is_that_of_the_stage1_model_and_of_the_saved_policy(smoke_run):
    """metrics/eval.json again, from the saved models, with the run's held-out prompts and
    streams: the `stage1` entry is the stage-1 model's evaluation, the `policy` entry the
    saved policy's (against the same reference)."""
    from rlhflab.ppo.components import PPOComponents
    from rlhflab.ppo.state import load_ppo_state
    from rlhflab.seeding import RowStreams
    from rlhflab.sources import context_length, policy_dir, prompt_task

    summary = json.loads((smoke_run.root / "metrics" / "eval.json").read_text())
    state = load_ppo_state(CONFIG, smoke_run, PPOComponents())
    try:
        task = prompt_task(CONFIG, state.tokenizer, context_length(policy_dir(CONFIG, smoke_run), CONFIG))
        streams = RowStreams(CONFIG.ppo_seed, ("eval-sampling",), list(range(len(task.eval_prompts))))

        def evaluate() -> dict:
            return state.components.evaluate(state, task.world, task.eval_prompts, CONFIG.ppo.response_length,
                                             CONFIG.ppo.temperature, streams)

        for name, weights in (("stage1", None), ("policy", load_causal_lm(smoke_run.stage3_policy).state_dict())):
            if weights is not None:
                state.policy.lm.load_state_dict(weights)
            again = evaluate()
            assert again.keys() == summary[name].keys()
            for key, value in again.items():
                assert math.isclose(value, summary[name][key], rel_tol=1e-4, abs_tol=1e-5), (name, key)
    finally:
        state.sampler.close()


def test_the_saved_corpus_sample_is_the_first_training_texts(smoke_run):
    from rlhflab.sources import context_length, sft_data, stage1_tokenizer

    data = sft_data(CONFIG, stage1_tokenizer(CONFIG), context_length(None, CONFIG))
    saved = (smoke_run.world / "corpus_sample.txt").read_text(encoding="utf-8").splitlines()
    assert saved == [completion for _, completion in data.train[:200]]


def test_the_tensorboard_mirror_holds_every_logged_number(smoke_run):
    """RUN/tensorboard/STAGE holds the scalars of metrics/STAGE.jsonl, step by step (float32)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for stage in ("pretrain", "reward", "ppo"):
        events = EventAccumulator(str(smoke_run.tensorboard(stage)), size_guidance={"scalars": 0})
        events.Reload()
        logged = read_jsonl(smoke_run.metrics(stage))
        for key in {k for r in logged for k in r} - {"step"}:
            expected = [(r["step"], r[key]) for r in logged if key in r and r[key] is not None]
            mirrored = [(e.step, e.value) for e in events.Scalars(key)]
            assert [s for s, _ in mirrored] == [s for s, _ in expected], (stage, key)
            assert all(math.isclose(m, v, rel_tol=1e-6, abs_tol=1e-30) or (math.isnan(m) and math.isnan(v))
                       for (_, m), (_, v) in zip(mirrored, expected)), (stage, key)

"""Statistics of the embedded `reviews` world that docs/world.md quotes.

    python bench/world_stats.py [--run RUN]

With `--run`, also how often the gold length penalty fires on samples of that run's
stage-1 model (held-out prompts, temperature 1, the default 32-token budget).
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path

from rlhflab.worlds.reviews import ReviewsWorld
from rlhflab.worlds.reviews.gold import sentiment_analyzer

RESPONSE_TOKENS = 32  # PPOConfig.response_length and RewardConfig.response_length


def fires(world: ReviewsWorld, prompts: list[str], responses: list[str]) -> str:
    excess = [b.excess_words for b in world.gold_breakdowns(prompts, responses)]
    paid = [e for e in excess if e]
    return (f"{len(paid) / len(excess):.1%} of {len(excess)} pay the length penalty"
            + (f" (mean {statistics.fmean(paid):.1f} words over)" if paid else ""))


def rambling(world: ReviewsWorld, n: int, rng: random.Random) -> list[str]:
    """Responses that never emit EOS: grammar text run on to the end of the token budget."""
    out = []
    for _ in range(n):
        words: list[str] = []
        while len(words) < RESPONSE_TOKENS:
            words += world.grammar.sample_review(rng, mood="positive").split()
        out.append(" ".join(words[:RESPONSE_TOKENS]))
    return out


def padded(world: ReviewsWorld, n: int, rng: random.Random) -> list[str]:
    """A positive review padded with further whole positive sentences while they fit the budget."""
    out = []
    for _ in range(n):
        words = world.grammar.sample_review(rng, mood="positive").split()
        while True:
            more = world.grammar.sample_review(rng, mood="positive").split()
            if len(words) + len(more) > RESPONSE_TOKENS:
                break
            words += more
        out.append(" ".join(words))
    return out


def stage1_samples(world: ReviewsWorld, run: str, prompts: list[str]) -> list[str]:
    import torch

    from rlhflab.data.batching import decode_responses, encode_prompts
    from rlhflab.models.lm import load_causal_lm
    from rlhflab.models.sampling import sample_responses
    from rlhflab.runs import RunDir

    stage1 = RunDir(Path(run)).stage1_lm
    model, tokenizer = load_causal_lm(stage1).eval(), world.tokenizer()
    ids, mask = encode_prompts(tokenizer, prompts)
    with torch.no_grad():
        s = sample_responses(model, ids, mask, RESPONSE_TOKENS, 1.0, tokenizer.eos_token_id, tokenizer.pad_token_id,
                             torch.Generator().manual_seed(0))
    return decode_responses(tokenizer, s.response_ids, s.mask)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", help="a run directory whose stage-1 samples to check for the length penalty")
    args = parser.parse_args()
    world = ReviewsWorld()
    vader = sentiment_analyzer()
    rng = random.Random(5)
    for mood in ("positive", "negative", "mixed"):
        scores = [vader.polarity_scores(world.grammar.sample_review(rng, mood=mood))["compound"] for _ in range(2000)]
        print(f"VADER compound, 2000 {mood} reviews (seed 5): mean {statistics.fmean(scores):+.2f} "
              f"std {statistics.stdev(scores):.2f}")
    corpus = world.corpus(20000, seed=0)
    lengths = sorted(len(r.split()) for r in corpus)
    gold = world.gold([""] * len(corpus), corpus)
    penalised = sum(b.utility != b.sentiment for b in world.gold_breakdowns([""] * len(corpus), corpus))
    print(f"corpus(20000, seed=0): words mean {statistics.fmean(lengths):.1f}, "
          f"99.9th percentile {lengths[int(0.999 * len(lengths))]}, max {lengths[-1]}")
    print(f"gold utility: mean {statistics.fmean(gold):+.3f} std {statistics.stdev(gold):.3f}; "
          f"{sum(g > 0 for g in gold) / len(gold):.1%} above 0, {sum(g < 0 for g in gold) / len(gold):.1%} below; "
          f"{penalised} of {len(corpus)} pay a penalty; grammatical rate {world.grammatical_rate(corpus):.3f}")
    print(f"vocabulary: {len(world.grammar.vocabulary)} words, tokenizer {len(world.tokenizer())} ids")
    limit = world.config.length_soft_limit
    print(f"length penalty (soft limit {limit} words of prompt + response):")
    print(f"  corpus reviews: {fires(world, [''] * len(corpus), corpus)}")
    prompts = world.prompts(1000, 0, split="heldout")
    print(f"  held-out prompt + a {RESPONSE_TOKENS}-token response that never stops: "
          f"{fires(world, prompts, rambling(world, len(prompts), random.Random(1)))}")
    print(f"  held-out prompt + a positive review padded with whole positive sentences up to {RESPONSE_TOKENS} tokens: "
          f"{fires(world, prompts, padded(world, len(prompts), random.Random(2)))}")
    if args.run:
        print(f"  held-out prompt + a sample of {args.run}'s stage-1 model: "
              f"{fires(world, prompts, stage1_samples(world, args.run, prompts))}")


if __name__ == "__main__":
    main()

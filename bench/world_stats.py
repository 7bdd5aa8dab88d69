"""Statistics of the embedded `reviews` world that docs/world.md quotes.

    python bench/world_stats.py
"""

from __future__ import annotations

import random
import statistics

from rlhflab.worlds.reviews import ReviewsWorld
from rlhflab.worlds.reviews.gold import sentiment_analyzer


def main() -> None:
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


if __name__ == "__main__":
    main()

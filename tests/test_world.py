"""Tests of the embedded reviews world: grammar, gold utility, labeler, tokenizer."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from vaderSentiment.vaderSentiment import BOOSTER_DICT, NEGATE, SentimentIntensityAnalyzer

from rlhflab.worlds.reviews import (
    GoldBreakdown,
    ReviewGrammar,
    ReviewsWorld,
    SimulatedLabeler,
    WorldConfig,
    build_tokenizer,
    gold_breakdown,
    gold_utility,
    preference_probability,
)
from rlhflab.worlds.reviews import words as W
from rlhflab.worlds.reviews.world import HELDOUT_BUCKETS, prompt_split

VADER = SentimentIntensityAnalyzer()


def compound(text: str) -> float:
    return VADER.polarity_scores(text)["compound"]


@pytest.fixture(scope="module")
def world() -> ReviewsWorld:
    return ReviewsWorld()


@pytest.fixture(scope="module")
def grammar(world: ReviewsWorld) -> ReviewGrammar:
    return world.grammar


@pytest.fixture(scope="module")
def corpus(world: ReviewsWorld) -> list[str]:
    return world.corpus(2000, seed=0)


# --- grammar: generate and check ------------------------------------------------------


def test_sampled_reviews_all_parse(grammar: ReviewGrammar, corpus: list[str]) -> None:
    for text in corpus:
        n, bad = grammar.count_ungrammatical(text)
        assert 1 <= n <= 3, text
        assert bad == 0, text
        assert text.split()[-1] in (".", "!"), text


def test_sampled_reviews_follow_the_text_convention(corpus: list[str]) -> None:
    for text in corpus:
        assert text == text.lower() == " ".join(text.split()), text


def test_every_template_is_used(grammar: ReviewGrammar, corpus: list[str]) -> None:
    used = {grammar.template_of(s) for text in corpus for s in grammar.split_sentences(text)}
    assert used == {t.name for t in grammar.templates}
    assert 10 <= len(grammar.templates) <= 20


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_prompt_is_a_proper_prefix_of_its_review(grammar: ReviewGrammar, seed: int) -> None:
    # sample_prompt draws a review, then its length, from the same rng.
    prompt = grammar.sample_prompt(random.Random(seed))
    review = grammar.sample_review(random.Random(seed))
    assert 2 <= len(prompt.split()) <= 5
    assert review.startswith(prompt + " ")


def test_prompts_never_complete_the_review(world: ReviewsWorld) -> None:
    for prompt in world.prompts(500, seed=3):
        assert 2 <= len(prompt.split()) <= 5
        assert prompt.split()[0] != "."


GRAMMATICAL = [
    "the plot was really wonderful .",
    "these actors were not very funny !",
    "it was a masterpiece .",
    "what an awful spoof !",
    "i loved the cast but hated the ending .",
    "although the plot was dull , the cast was great .",
    "we watched a slow western yesterday .",
    "i would not recommend it .",
    "this film was beautifully shot .",
    "the endings thrilled us !",
    "the plot and the pacing were awful .",
    "overall , it was great !",
]

# Mutations of GRAMMATICAL sentences: a word swapped to another category, a dropped
# word, shuffled order, broken agreement (was/were, a/an), a wrong terminator.
UNGRAMMATICAL = [
    "the plot was really plot .",  # adjective -> noun
    "the plot was really loved .",  # adjective -> verb
    "the plot were really wonderful .",  # singular subject, plural copula
    "the plots was wonderful .",  # plural subject, singular copula
    "it was an masterpiece .",  # a/an rule
    "what a awful spoof !",  # a/an rule
    "what an awful spoof .",  # exclamation must end with "!"
    "i loved the cast but the ending .",  # dropped verb
    "i loved cast !",  # dropped determiner
    "although the plot was dull the cast was great .",  # dropped comma
    "we watched western yesterday .",  # dropped determiner
    "the plot was really .",  # dropped adjective
    "the plot was wonderful",  # dropped terminator
    "i would recommend not it .",  # shuffled
    "plot the was wonderful .",  # shuffled
    "was the plot wonderful .",  # shuffled
    "this film was beautifully .",  # dropped participle
    "the ending thrilled .",  # dropped object
    "the plot was wonderful wonderful .",  # repeated slot
    "the plot was really very wonderful .",  # two intensifiers
    "great great great !",
    "the plot was xyzzy .",  # unknown word
]


@pytest.mark.parametrize("sentence", GRAMMATICAL)
def test_hand_written_sentences_parse(grammar: ReviewGrammar, sentence: str) -> None:
    assert grammar.is_grammatical(sentence.split())


@pytest.mark.parametrize("sentence", UNGRAMMATICAL)
def test_mutated_sentences_are_ungrammatical(grammar: ReviewGrammar, sentence: str) -> None:
    assert not grammar.is_grammatical(sentence.split())


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), data=st.data())
def test_generic_mutations_are_detected(grammar: ReviewGrammar, seed: int, data) -> None:
    sentence = grammar.split_sentences(grammar.sample_review(random.Random(seed)))[0]
    i = data.draw(st.integers(0, len(sentence) - 1))
    unknown = sentence[:i] + ["<unk>"] + sentence[i + 1 :]
    assert not grammar.is_grammatical(unknown)
    assert not grammar.is_grammatical(sentence[:-1])  # terminator dropped
    assert not grammar.is_grammatical(sentence + sentence)  # two sentences glued


def test_split_sentences_and_count_trailing_fragment(grammar: ReviewGrammar) -> None:
    text = "it was great . i loved the cast ! the plot was"
    assert grammar.split_sentences(text) == [
        ["it", "was", "great", "."],
        ["i", "loved", "the", "cast", "!"],
        ["the", "plot", "was"],
    ]
    assert grammar.count_ungrammatical(text) == (3, 1)
    assert grammar.count_ungrammatical("") == (0, 0)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_same_seed_same_output(seed: int) -> None:
    a, b = ReviewsWorld(), ReviewsWorld()
    assert a.corpus(20, seed) == b.corpus(20, seed)
    assert a.prompts(20, seed) == b.prompts(20, seed)
    assert a.grammar.vocabulary == b.grammar.vocabulary


def test_different_seeds_differ(world: ReviewsWorld) -> None:
    assert world.corpus(20, 0) != world.corpus(20, 1)
    assert world.prompts(20, 0) != world.prompts(20, 1)


def test_heldout_prompts_never_drawn_for_training(world: ReviewsWorld, grammar: ReviewGrammar) -> None:
    # A demo run's whole training stream (80 iterations of 64) and its stage-2 prompts.
    train = {p for step in range(80) for p in world.prompts(64, 1000 + step)} | set(world.prompts(4000, 7))
    heldout = world.prompts(256, 3, split="heldout")
    assert len(set(heldout)) > 100 and not train & set(heldout)
    # The partition is of the prompt space: a fresh draw of the grammar's openings lands in
    # the held-out part about one time in HELDOUT_BUCKETS, whatever the prompt's length.
    rng = random.Random(0)
    fresh = [grammar.sample_prompt(rng) for _ in range(20000)]
    share = sum(prompt_split(p) == "heldout" for p in fresh) / len(fresh)
    assert abs(share - 1 / HELDOUT_BUCKETS) < 0.04
    for n_words in (2, 3, 4, 5):
        of_length = [p for p in fresh if len(p.split()) == n_words]
        assert abs(sum(prompt_split(p) == "heldout" for p in of_length) / len(of_length) - share) < 0.05
    # Both parts keep the grammar's mix: the mean opening length differs by under half a word.
    mean_words = lambda ps: sum(len(p.split()) for p in ps) / len(ps)  # noqa: E731
    assert abs(mean_words(heldout) - mean_words(world.prompts(256, 3))) < 0.5


# --- vocabulary ------------------------------------------------------------------------


def test_vocabulary_size_and_sorted(grammar: ReviewGrammar) -> None:
    vocab = grammar.vocabulary
    assert 400 <= len(vocab) <= 700
    assert vocab == sorted(set(vocab))
    assert "." in vocab and "!" in vocab


def test_categories_are_disjoint(grammar: ReviewGrammar) -> None:
    seen: dict[str, str] = {}
    for cat, ws in grammar.categories.items():
        for w in ws:
            assert w not in seen, f"{w!r} in {cat} and {seen[w]}"
            assert w not in grammar.literals, f"{w!r} in {cat} and literal"
            seen[w] = cat
    assert set(seen) | grammar.literals == set(grammar.vocabulary)


def test_sentiment_words_are_in_vader_lexicon() -> None:
    lexicon = VADER.lexicon
    for cat in W.SENTIMENT_CATEGORIES:
        for w in W.CATEGORIES[cat]:
            assert w in lexicon, (cat, w)
            assert w not in BOOSTER_DICT, (cat, w)
            if cat.endswith("+"):
                assert lexicon[w] >= 1.0, (cat, w, lexicon[w])
            else:
                assert lexicon[w] <= -1.0, (cat, w, lexicon[w])


def test_neutral_and_function_words_carry_no_vader_sentiment(grammar: ReviewGrammar) -> None:
    neutral = [w for cat in W.NEUTRAL_CATEGORIES for w in W.CATEGORIES[cat]]
    for w in neutral + sorted(grammar.function_words):
        assert w not in VADER.lexicon, w
        assert w not in BOOSTER_DICT, w
    for w in neutral:
        assert w not in NEGATE, w


def test_intensifiers_are_vader_boosters() -> None:
    for w in W.BOOST:
        assert BOOSTER_DICT.get(w, 0) > 0 and w not in VADER.lexicon, w
    for w in W.DAMP:
        assert BOOSTER_DICT.get(w, 0) < 0 and w not in VADER.lexicon, w


def test_corpus_sentiment_is_mixed(corpus: list[str]) -> None:
    scores = [compound(t) for t in corpus]
    positive = sum(s > 0.05 for s in scores) / len(scores)
    negative = sum(s < -0.05 for s in scores) / len(scores)
    assert positive > 0.2 and negative > 0.2
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    assert abs(mean) < 0.15 and std > 0.4


def test_mood_steers_sentiment(grammar: ReviewGrammar) -> None:
    rng = random.Random(0)
    pos = [compound(grammar.sample_review(rng, mood="positive")) for _ in range(300)]
    neg = [compound(grammar.sample_review(rng, mood="negative")) for _ in range(300)]
    assert sum(pos) / 300 > 0.3 and sum(neg) / 300 < -0.3


# --- gold utility ---------------------------------------------------------------------


def test_grammar_samples_pay_no_penalty(world: ReviewsWorld, corpus: list[str]) -> None:
    breakdowns = world.gold_breakdowns([""] * len(corpus), corpus)
    penalised = [b for b in breakdowns if b.ungrammatical or b.repeats or b.excess_words]
    assert len(penalised) <= len(corpus) // 50  # at most 2 %: the longest reviews pay for length
    assert not any(b.ungrammatical or b.repeats for b in breakdowns)


def test_length_penalty_reached_by_a_response_that_never_stops(world: ReviewsWorld, grammar: ReviewGrammar) -> None:
    # A 2-word prompt and a 32-token response (the default budget) of distinct grammatical
    # sentences, cut off where the budget ends: the rambling a policy does when it never
    # emits EOS. At the default soft limit it pays for its length; a plain review does not.
    rng = random.Random(1)
    tokens: list[str] = []
    while len(tokens) < 32:
        tokens += grammar.sample_review(rng).split()
    b = world.gold_breakdowns(["it was"], [" ".join(tokens[:32])])[0]
    assert b.excess_words == 2 + 32 - WorldConfig().length_soft_limit > 0
    assert world.gold_breakdowns(["the plot was"], ["really wonderful . i loved the cast !"])[0].excess_words == 0


def test_gold_of_a_plain_review() -> None:
    grammar, config = ReviewGrammar(), WorldConfig()
    b = gold_breakdown(grammar, config, "the plot was", "really wonderful . i loved the cast !")
    # full text parses, no content word repeats, 11 words < 30: u = compound.
    expected = compound("the plot was really wonderful . i loved the cast !")
    assert b == GoldBreakdown(expected, 0, 0, 0, expected)


def test_gold_hand_worked_penalties() -> None:
    grammar = ReviewGrammar()
    config = WorldConfig(
        ungrammatical_penalty=0.5, repeat_penalty=0.2, length_soft_limit=40, length_penalty=0.05
    )
    # "the plot was great great great !": 1 ungrammatical sentence; "great" x3 -> 2
    # repeated content words; 7 words. u = c - 0.5 * 1 - 0.2 * 2 = c - 0.9
    text = "the plot was great great great !"
    b = gold_breakdown(grammar, config, "the plot was", "great great great !")
    assert (b.ungrammatical, b.repeats, b.excess_words) == (1, 2, 0)
    assert b.utility == pytest.approx(compound(text) - 0.9)

    # a sentence three times: 2 duplicated sentences + ("plot", "great") x 2 extra each
    # = 6 repeats ("the", "was", "!" are function words). u = c - 0.2 * 6 = c - 1.2
    text = "the plot was great ! the plot was great ! the plot was great !"
    b = gold_breakdown(grammar, config, "the plot", text[len("the plot ") :])
    assert (b.ungrammatical, b.repeats, b.excess_words) == (0, 6, 0)
    assert b.utility == pytest.approx(compound(text) - 1.2)

    # length: 10 distinct 5-word sentences = 50 words; soft limit 40 -> 10 excess
    # words. Nouns/adjectives are distinct so no repeats. u = c - 0.05 * 10 = c - 0.5
    nouns, adjs = W.NOUN[:10], W.ADJ_POS[:10]
    text = " ".join(f"that {n} was {a} ." for n, a in zip(nouns, adjs))
    b = gold_breakdown(grammar, config, "", text)
    assert (b.ungrammatical, b.repeats, b.excess_words) == (0, 0, 10)
    assert b.utility == pytest.approx(compound(text) - 0.5)

    # an unterminated tail is one ungrammatical sentence. u = c - 0.5
    b = gold_breakdown(grammar, config, "it was", "great . the plot was")
    assert b.ungrammatical == 1
    assert b.utility == pytest.approx(compound("it was great . the plot was") - 0.5)


def test_gold_reads_response_in_context_of_prompt() -> None:
    grammar, config = ReviewGrammar(), WorldConfig()
    # The same response completes one prompt and is a fragment after another.
    assert gold_breakdown(grammar, config, "the plot was", "great .").ungrammatical == 0
    assert gold_breakdown(grammar, config, "the plot and", "great .").ungrammatical == 1
    # Whitespace around the join does not matter.
    u = gold_utility(grammar, config, "the plot was", "great .")
    assert gold_utility(grammar, config, "the plot was ", " great . ") == u


HACKS = [
    "great great great !",
    "wonderful wonderful wonderful wonderful !",
    "really really really great !",
    "great ! the plot was great ! the plot was great !",
    "great ! ! ! !",
    "great . " + " ".join(f"the {n} was wonderful !" for n in W.NOUN[:10]),
]


@pytest.mark.parametrize("hack", HACKS)
def test_hacked_texts_score_below_a_plain_positive_review(world: ReviewsWorld, hack: str) -> None:
    plain = world.gold(["the plot was"], ["wonderful ."])[0]
    hacked = world.gold(["the plot was"], [hack])[0]
    assert plain > 0.5
    assert hacked < plain - 0.3
    # ... although VADER alone prefers the hack (that is what makes it a hack).
    assert compound("the plot was " + hack) >= compound("the plot was wonderful .")


def test_world_gold_matches_breakdowns(world: ReviewsWorld) -> None:
    prompts = world.prompts(8, seed=1)
    responses = ["wonderful .", "", "great great !", "it was bad .", "x", ". .", "!", "and"]
    golds = world.gold(prompts, responses)
    assert golds == [b.utility for b in world.gold_breakdowns(prompts, responses)]
    direct = [gold_utility(world.grammar, world.config, p, r) for p, r in zip(prompts, responses)]
    assert golds == direct
    with pytest.raises(ValueError):
        world.gold(prompts, responses[:-1])


def test_grammatical_rate(world: ReviewsWorld) -> None:
    texts = ["it was great . the plot was", "i loved the cast !"]
    assert world.grammatical_rate(texts) == pytest.approx(2 / 3)
    assert world.grammatical_rate([]) == 1.0


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        WorldConfig(labeler_tau=0.0)
    with pytest.raises(ValueError):
        WorldConfig(repeat_penalty=-1.0)


# --- labeler ----------------------------------------------------------------------------


def test_preference_probability_hand_values() -> None:
    assert preference_probability(0.5, 0.5, 0.1) == 0.5
    # (0.3 - 0.1) / 0.1 = 2 -> 1 / (1 + e^-2) = 0.880797...
    assert preference_probability(0.3, 0.1, 0.1) == pytest.approx(0.8807970779778823)
    # (0.0 - 0.5) / 0.25 = -2 -> 0.119202...
    assert preference_probability(0.0, 0.5, 0.25) == pytest.approx(0.11920292202211755)
    # extreme gaps neither overflow nor leave [0, 1]
    assert preference_probability(1e3, -1e3, 1e-3) == 1.0
    assert preference_probability(-1e3, 1e3, 1e-3) == 0.0


def test_labeler_empirical_rate_matches_formula() -> None:
    grammar = ReviewGrammar()
    config = WorldConfig(labeler_tau=0.2)
    labeler = SimulatedLabeler(grammar, config)
    prompt, a, b = "the plot was", "somewhat good .", "slightly dull ."
    p = preference_probability(
        gold_utility(grammar, config, prompt, a), gold_utility(grammar, config, prompt, b), 0.2
    )
    assert 0.6 < p < 0.99  # an informative, not a certain, comparison
    rng = random.Random(0)
    n = 4000
    wins = sum(labeler.prefers_first(prompt, a, b, rng) for _ in range(n))
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(wins - n * p) < 4 * sigma


# --- tokenizer --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(grammar: ReviewGrammar) -> PreTrainedTokenizerFast:
    return build_tokenizer(grammar)


def test_special_tokens(tokenizer: PreTrainedTokenizerFast, grammar: ReviewGrammar) -> None:
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert [tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token] == [
        "<pad>", "<bos>", "<eos>", "<unk>"
    ]
    assert [tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id] == [0, 1, 2]
    assert tokenizer.unk_token_id == 3
    assert tokenizer.padding_side == "right"
    assert len(tokenizer) == len(grammar.vocabulary) + 4


def test_tokenizer_round_trip(tokenizer: PreTrainedTokenizerFast, corpus: list[str]) -> None:
    for text in corpus[:500]:
        ids = tokenizer(text)["input_ids"]
        assert len(ids) == len(text.split())  # one token per word, no bos/eos added
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids) == text
        wrapped = [tokenizer.bos_token_id] + ids + [tokenizer.eos_token_id, tokenizer.pad_token_id]
        assert tokenizer.decode(wrapped, skip_special_tokens=True) == text


def test_tokenizer_unknown_word(tokenizer: PreTrainedTokenizerFast) -> None:
    assert tokenizer("the xyzzy plot")["input_ids"][1] == tokenizer.unk_token_id


def test_save_and_reload(world: ReviewsWorld, corpus: list[str], tmp_path) -> None:
    world.save(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "tokenizer")
    tok = world.tokenizer()
    batch = corpus[:50]
    assert reloaded(batch)["input_ids"] == tok(batch)["input_ids"]
    assert reloaded.decode(tok(batch[0])["input_ids"]) == batch[0]
    assert (reloaded.pad_token_id, reloaded.bos_token_id, reloaded.eos_token_id) == (0, 1, 2)
    assert reloaded.padding_side == "right"
    info = json.loads((tmp_path / "world.json").read_text())
    assert info["vocabulary"] == world.grammar.vocabulary
    assert info["config"] == {
        "labeler_tau": 0.1,
        "ungrammatical_penalty": 0.5,
        "repeat_penalty": 0.2,
        "length_soft_limit": 30,
        "length_penalty": 0.05,
    }
    assert [t["name"] for t in info["templates"]] == [t.name for t in world.grammar.templates]


def test_padding_is_right(tokenizer: PreTrainedTokenizerFast) -> None:
    out = tokenizer(["it was great .", "i loved the cast !"], padding=True)
    assert out["input_ids"][0][-1] == tokenizer.pad_token_id
    assert out["attention_mask"][0] == [1, 1, 1, 1, 0]


def test_labeler_from_known_utilities_draws_the_same_labels(world: ReviewsWorld, corpus: list[str]) -> None:
    labeler = SimulatedLabeler(world.grammar, world.config)
    prompts, a, b = world.prompts(200, 4), corpus[:200], corpus[200:400]
    first, second = random.Random(9), random.Random(9)
    from_text = [labeler.prefers_first(p, x, y, first) for p, x, y in zip(prompts, a, b)]
    from_utility = [labeler.prefers_higher(ux, uy, second)
                    for ux, uy in zip(world.gold(prompts, a), world.gold(prompts, b))]
    assert from_text == from_utility and 40 < sum(from_text) < 160

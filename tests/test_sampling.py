"""The token draws against known categorical distributions."""

import pytest
import torch

from rlhflab.models.sampling import draw_tokens, exponential_race, sample_responses
from rlhflab.seeding import RowStreams
from test_models import EOS, PAD, VOCAB, left_padded_prompts, tiny_gpt2, tiny_llama


def assert_frequencies_match(draws: torch.Tensor, probs: torch.Tensor, sigmas: float = 4.5) -> None:
    """Each category's count within `sigmas` binomial standard deviations of n * p."""
    n = draws.numel()
    counts = torch.bincount(draws, minlength=probs.numel()).double()
    expected = n * probs.double()
    std = (n * probs.double() * (1 - probs.double())).sqrt()
    assert ((counts - expected).abs() <= sigmas * std + 1e-9).all(), (counts, expected)


def test_race_draws_each_category_with_its_probability():
    weights = torch.tensor([5.0, 2.5, 1.5, 0.7, 0.299, 1e-3, 0.0])  # unnormalised
    rows = 200_000
    draws = exponential_race(weights.expand(rows, -1), torch.Generator().manual_seed(0))
    assert_frequencies_match(draws, weights / weights.sum())
    assert not (draws == 6).any()  # weight 0 is never drawn


@pytest.mark.parametrize("vocab", [7, 16, 40])  # blocks that do and do not divide V
def test_two_level_draw_gives_each_token_its_probability(vocab):
    g = torch.Generator().manual_seed(vocab)
    probs = torch.softmax(3 * torch.randn(vocab, generator=g), -1)
    probs[vocab // 2] = 0.0  # a token that must never come
    probs /= probs.sum()
    draws = draw_tokens(probs.expand(200_000, -1), torch.Generator().manual_seed(1))
    assert_frequencies_match(draws, probs)
    assert draws.max() < vocab and not (draws == vocab // 2).any()


def test_non_finite_probabilities_are_an_error_not_a_token():
    probs = torch.full((2, 10), 0.1)
    probs[1, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        draw_tokens(probs, torch.Generator().manual_seed(0))


def test_draws_are_reproducible_and_depend_on_the_seed():
    probs = torch.softmax(torch.randn(64, 50, generator=torch.Generator().manual_seed(1)), -1)
    a = draw_tokens(probs, torch.Generator().manual_seed(3))
    assert torch.equal(a, draw_tokens(probs, torch.Generator().manual_seed(3)))
    assert not torch.equal(a, draw_tokens(probs, torch.Generator().manual_seed(4)))


@pytest.mark.parametrize("make_model", [tiny_gpt2, tiny_llama])
@pytest.mark.parametrize("temperature", [1.0, 0.5])
@torch.no_grad()
def test_first_sampled_token_follows_the_models_tempered_distribution(make_model, temperature):
    """Many copies of one prompt: the first tokens' frequencies against softmax(logits / T)
    from a plain forward of the prompt."""
    model = make_model()
    prompt_ids, prompt_mask = left_padded_prompts([4])
    rows = 20_000
    s = sample_responses(model, prompt_ids.expand(rows, -1), prompt_mask.expand(rows, -1), 1, temperature, EOS, PAD,
                         torch.Generator().manual_seed(0))
    probs = torch.softmax(model(input_ids=prompt_ids).logits[0, -1] / temperature, -1)
    assert_frequencies_match(s.response_ids[:, 0], probs)
    assert s.response_ids.max() < VOCAB


@pytest.mark.parametrize("make_model", [tiny_gpt2, tiny_llama])
def test_a_row_samples_the_same_response_in_any_share_of_the_batch(make_model):
    """With a stream per row, sampling a batch whole, in two shares, or one row at a time
    gives each row the same response (what lets rollouts be sharded over processes)."""
    model = make_model()
    prompt_ids, prompt_mask = left_padded_prompts([3, 5, 2, 4, 6, 1, 3, 5])
    streams = RowStreams(0, ("test",), list(range(8)))
    whole = sample_responses(model, prompt_ids, prompt_mask, 12, 1.0, EOS, PAD, streams)
    for shares in ([range(0, 4), range(4, 8)], [[i] for i in range(8)], [[5, 1, 7]]):
        for rows in shares:
            rows = list(rows)
            part = sample_responses(model, prompt_ids[rows], prompt_mask[rows], 12, 1.0, EOS, PAD, streams.subset(rows))
            for i, row in enumerate(rows):
                n = int(whole.mask[row].sum())
                assert torch.equal(part.response_ids[i, :n], whole.response_ids[row, :n])
                assert torch.equal(part.mask[i].sum(), whole.mask[row].sum())


def test_row_streams_depend_on_the_row_not_on_its_neighbours():
    streams = RowStreams(0, ("test",), [0, 1, 2, 3])
    whole = streams.rand((4, 5))
    assert torch.equal(streams.subset([2, 0]).rand((2, 5)), whole[[2, 0]])
    assert not torch.equal(RowStreams(1, ("test",), [0]).rand((1, 5)), whole[:1])
    with pytest.raises(ValueError, match="3 rows drawn from 4 streams"):
        RowStreams(0, ("test",), [0, 1, 2, 3]).rand((3, 5))

"""Raters that are programs, for tests and benches: they rate through the study's HTTP
API exactly as a person's page does (fetch the item served, answer it with its nonce).

`WorldRater` is the embedded world's simulated person: it scores a response with the
world's gold utility, adds Gaussian noise, and maps the result onto the scale by the
quantiles of the utility on stage-1 samples (each scale point as likely as the next for
the model PPO starts from). Its noise is a multiple of those utilities' spread; the
default `WORLD_NOISE` was fitted (bench/rating_bots.py, on a demo run; checked on two
runs it was not fitted on) to put two such raters' ordinal Krippendorff's alpha in
0.4-0.7, raters who agree about as loosely as people judging text quality often do.
"""

from __future__ import annotations

import bisect
import json
import random
import statistics
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from rlhflab.seeding import derive_seed, py_rng
from rlhflab.studies.design import UNREADABLE

Policy = Callable[[str, str], "int | None"]  # (prompt, response) -> a point of the scale, or None: unreadable
WORLD_NOISE = 0.6
"""The simulated rater's noise, in standard deviations of the stage-1 utilities: mean alpha 0.52
on the run it was fitted on, 0.62 and 0.63 on two healthy runs it was not, 0.73 on an over-optimised
one (its samples range wider in quality; docs/benchmarks.md)."""


class StudyClient:
    """One rater's link, spoken to over HTTP (urllib: no dependency beyond the standard library)."""

    def __init__(self, link: str, timeout: float = 30.0) -> None:
        self.link = link.rstrip("/") + "/"
        self.timeout = timeout

    def _call(self, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.link + path, data=data, method="GET" if body is None else "POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def next(self) -> dict:
        status, body = self._call("api/next")
        if status != 200:
            raise RuntimeError(f"{self.link}api/next: HTTP {status} {body}")
        return body

    def rate(self, serve: int, csrf: str, rating: int | None) -> str:
        _, body = self._call("api/rate", {"serve": serve, "csrf": csrf,
                                          "rating": UNREADABLE if rating is None else rating})
        return body.get("outcome", "error")

    def choose(self, serve: int, csrf: str, choice: str) -> str:
        """A pair study's answer: "left", "right", "tie" or "both_bad"."""
        _, body = self._call("api/rate", {"serve": serve, "csrf": csrf, "choice": choice})
        return body.get("outcome", "error")


@dataclass
class BotReport:
    recorded: int = 0
    refused: list[str] = field(default_factory=list)


def rate_until_done(client: StudyClient, policy: Policy, limit: int | None = None) -> BotReport:
    """Rate every item the study serves this rater (or `limit` of them)."""
    report = BotReport()
    while limit is None or report.recorded < limit:
        item = client.next()
        if item["done"]:
            break
        outcome = client.rate(item["serve"], item["csrf"], policy(item["prompt"], item["response"]))
        if outcome == "recorded":
            report.recorded += 1
        else:
            report.refused.append(outcome)
            break
    return report


PairPolicy = Callable[[str, str, str], str]  # (prompt, left, right) -> "left", "right", "tie" or "both_bad"


def compare_until_done(client: StudyClient, policy: PairPolicy, limit: int | None = None) -> BotReport:
    """Answer every pair the study serves this rater (or `limit` of them)."""
    report = BotReport()
    while limit is None or report.recorded < limit:
        item = client.next()
        if item["done"]:
            break
        outcome = client.choose(item["serve"], item["csrf"], policy(item["prompt"], item["left"], item["right"]))
        if outcome != "recorded":
            report.refused.append(outcome)
            break
        report.recorded += 1
    return report


def rate_concurrently(links: Sequence[str], policies: Sequence[Policy], limit: int | None = None) -> list[BotReport]:
    """One thread per link, all rating at once."""
    reports = [BotReport() for _ in links]

    def work(index: int) -> None:
        reports[index] = rate_until_done(StudyClient(links[index]), policies[index], limit)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(links))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return reports


@dataclass
class WorldRater:
    """The simulated person of the embedded world (module docstring)."""

    utility: Callable[[str, str], float]  # the world's gold utility u(prompt, response)
    cuts: list[float]  # the scale's inner boundaries on the utility: len = points - 1
    scale_min: int
    noise: float  # standard deviation of the noise, in utility units
    seed: int

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def __call__(self, prompt: str, response: str) -> int:
        noisy = self.utility(prompt, response) + self._rng.gauss(0.0, self.noise)
        return self.scale_min + bisect.bisect_right(self.cuts, noisy)


@dataclass
class WorldComparer:
    """The simulated labeler of a pair: each response's gold utility plus noise of its own
    (Thurstone's comparative judgement, 1927, case V); the higher wins, and a difference
    within `tie_margin` is a tie. The same noise as `WorldRater`'s, in the same unit."""

    utility: Callable[[str, str], float]
    noise: float
    seed: int
    tie_margin: float = 0.0
    per_item: bool = False
    """The noise drawn from a stream named by the item (its prompt and responses) rather than one
    stream in the order items come: a judge that answers each item once then answers a study the
    same way whatever order it is served in (a person's repeats stay noisy without it)."""

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def __call__(self, prompt: str, left: str, right: str) -> str:
        rng = py_rng(self.seed, "item", prompt, left, right) if self.per_item else self._rng
        difference = (self.utility(prompt, left) + rng.gauss(0.0, self.noise)) - \
            (self.utility(prompt, right) + rng.gauss(0.0, self.noise))
        if abs(difference) <= self.tie_margin:
            return "tie"
        return "left" if difference > 0 else "right"


def quantile_cuts(reference: Sequence[float], points: int) -> list[float]:
    """The `points - 1` inner quantiles of `reference`: the scale's boundaries."""
    ordered = sorted(reference)
    return [ordered[min(len(ordered) - 1, (len(ordered) * k) // points)] for k in range(1, points)]


def world_raters(run: Path, reference: Sequence[tuple[str, str]], scale: tuple[int, int], count: int,
                 noise: float = WORLD_NOISE, seed: int = 0) -> list[WorldRater]:
    """`count` independent simulated raters for a run of the embedded world; `reference`:
    stage-1 samples (prompt, response) that set the scale's quantiles and the noise's unit."""
    utility = world_utility(run)
    utilities = [utility(p, r) for p, r in reference]
    if len(utilities) < 2:
        raise ValueError("the simulated rater needs at least two stage-1 samples to set its scale")
    cuts = quantile_cuts(utilities, scale[1] - scale[0] + 1)
    spread = statistics.pstdev(utilities)
    return [WorldRater(utility, cuts, scale[0], noise * spread, derive_seed(seed, "world-rater", str(k)))
            for k in range(count)]


def world_comparers(run: Path, reference: Sequence[tuple[str, str]], count: int, noise: float = WORLD_NOISE,
                    seed: int = 0, per_item: bool = False) -> list[WorldComparer]:
    """`count` independent simulated labelers of pairs for a run of the embedded world; the
    noise's unit is the spread of the gold utility over `reference` (stage-1 samples)."""
    utility = world_utility(run)
    utilities = [utility(p, r) for p, r in reference]
    if len(utilities) < 2:
        raise ValueError("the simulated labeler needs at least two stage-1 samples to set its noise")
    spread = statistics.pstdev(utilities)
    return [WorldComparer(utility, noise * spread, derive_seed(seed, "world-comparer", str(k)), per_item=per_item)
            for k in range(count)]


def world_utility(run: Path) -> Callable[[str, str], float]:
    """The gold utility u(prompt, response) of a run's world."""
    from rlhflab.worlds.reviews import ReviewsWorld, WorldConfig

    info = json.loads((Path(run) / "world" / "world.json").read_text(encoding="utf-8"))
    world = ReviewsWorld(WorldConfig(**info["config"]))
    return lambda prompt, response: world.gold([prompt], [response])[0]

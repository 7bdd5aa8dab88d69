"""A person at a study's page, in the real browser: reads what the page shows and answers as the
embedded world's gold utility says (the higher-utility response of a pair; a rating placed on
the scale by utility), by key, and by a click on every fifth answer.

The documented workflows' test uses it where the docs say "serve it to people", so a served
study is answered through the page a rater sees, and the commands after it read real answers."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlhflab.worlds.reviews import ReviewsWorld

CLICK_EVERY = 5  # every fifth answer by mouse, the others by key


@dataclass
class WorldPerson:
    browser: object  # a playwright Browser
    world: ReviewsWorld = field(default_factory=ReviewsWorld)
    answers: int = 0

    def utility(self, prompt: str, response: str) -> float:
        return self.world.gold([prompt], [response])[0]

    def answer(self, link: str, most: int) -> int:
        """Answer the items the page serves at `link`, `most` of them at the most, until it says all
        is done; returns how many were answered."""
        page = self.browser.new_page()
        try:
            page.goto(link)
            given = 0
            while page.locator("#rating-form").count():
                if given == most:
                    return given  # enough for now, as a person stops with the study still open
                key = self._choice(page)
                button = page.locator(f'#rating-form button[data-key="{key}"]')
                with page.expect_navigation():
                    if (self.answers + 1) % CLICK_EVERY == 0:
                        button.click()
                    else:
                        page.keyboard.press(key)
                given += 1
                self.answers += 1
            said = page.text_content("main") or ""  # as written: the page's style shows headings in capitals
            assert "All done" in said, f"{link}: the page neither serves an item nor says done: {said[:300]!r}"
            return given
        finally:
            page.close()

    def _choice(self, page) -> str:
        prompt = page.inner_text("#prompt")
        if page.locator("#response-a").count():
            left = self.utility(prompt, page.inner_text("#response-a"))
            right = self.utility(prompt, page.inner_text("#response-b"))
            return "t" if left == right else ("a" if left > right else "b")
        points = [int(k) for k in page.eval_on_selector_all(
            "#rating-form button[data-key]", "buttons => buttons.map(b => b.dataset.key)") if k.isdigit()]
        # utility runs from about -1 (hostile or broken) to +1 (glowing and clean): onto the scale
        share = min(1.0, max(0.0, (self.utility(prompt, page.inner_text("#response")) + 1.0) / 2.0))
        return str(points[round(share * (len(points) - 1))])

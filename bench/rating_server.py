"""The rating server under load: concurrent bot raters posting ratings through the HTTP
API to a real `rlhflab rate` server (its own process, uvicorn, SQLite WAL), then the
database read back: every rating accepted is there, once.

    python bench/rating_server.py --raters 20 --ratings 2000 --doc docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchlib import replace_section  # noqa: E402
from rlhflab.studies.bots import StudyClient  # noqa: E402
from study_server import Server  # noqa: E402

START, END = "<!-- rating-server:start -->", "<!-- rating-server:end -->"
RESULTS = Path(__file__).parent / "results" / "rating_server.json"


def build_study(root: Path, raters: int, ratings: int, repeat_every: int) -> Path:
    """A study whose items each need every rater, `ratings // raters` items in all."""
    items = ratings // raters
    samples = root / "samples.jsonl"
    samples.write_text("".join(json.dumps({"step": step, "prompt": f"prompt {step}",
                                           "completion": f"a response of some length, number {step}. " * 4}) + "\n"
                               for step in range(items)))
    study = root / "study"
    subprocess.run([sys.executable, "-m", "rlhflab.cli", "rate", str(samples), "--study", str(study),
                    "--bins", "10", "--per-bin", str(items // 10), "--ratings-per-item", str(raters),
                    "--raters", str(raters), "--repeat-every", str(repeat_every), "--no-serve"],
                   check=True, capture_output=True)
    return study


def rate_all(link: str, latencies: list[float], outcomes: list[str]) -> None:
    client = StudyClient(link)
    while True:
        began = time.perf_counter()
        item = client.next()
        if item["done"]:
            return
        outcome = client.rate(item["serve"], item["csrf"], 1 + item["serve"] % 7)
        latencies.append(time.perf_counter() - began)
        outcomes.append(outcome)


def measure(raters: int, ratings: int, repeat_every: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        study = build_study(Path(tmp), raters, ratings, repeat_every)
        server = Server(study, raters)
        try:
            latencies: list[list[float]] = [[] for _ in range(raters)]
            outcomes: list[list[str]] = [[] for _ in range(raters)]
            threads = [threading.Thread(target=rate_all, args=(link, latencies[k], outcomes[k]))
                       for k, link in enumerate(server.links.values())]
            began = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.perf_counter() - began
        finally:
            server.stop()
        with sqlite3.connect(study / "study.sqlite") as conn:
            stored = conn.execute("SELECT COUNT(*) FROM ratings").fetchone()[0]
            distinct = conn.execute("SELECT COUNT(DISTINCT serve_id) FROM ratings").fetchone()[0]
            fresh_pairs = conn.execute("SELECT COUNT(DISTINCT rater_id || ':' || item_id) FROM ratings "
                                       "WHERE repeat = 0").fetchone()[0]
            items = conn.execute("SELECT COUNT(*) FROM items").fetchone()[0]
    recorded = sum(o.count("recorded") for o in outcomes)
    every = sorted(t for per in latencies for t in per)
    return {
        "raters": raters, "items": items, "repeat_every": repeat_every, "posted": sum(map(len, outcomes)),
        "recorded": recorded, "stored": stored, "distinct_serves": distinct, "fresh_rater_item_pairs": fresh_pairs,
        "refused": sum(len(o) - o.count("recorded") for o in outcomes),
        "wall_s": round(wall, 2), "ratings_per_s": round(stored / wall, 1),
        "latency_ms_median": round(1000 * statistics.median(every), 1),
        "latency_ms_p95": round(1000 * every[int(0.95 * (len(every) - 1))], 1),
    }


def render(cells: list[dict], command: str) -> str:
    lines = [START, "## The rating server under concurrent raters", "",
             f"Command: `{command}` (2-core CPU; the server is `rlhflab rate` in its own process, uvicorn with one "
             "worker, SQLite in WAL mode with `synchronous = FULL`; the bots are threads of one client process on "
             "the same cores, each fetching its next item and posting its rating as the page does). A rating is one "
             "`GET api/next` and one `POST api/rate`; the latency is the pair's.", "",
             "| raters | items | repeats every | posted | stored | lost | duplicated | wall s | ratings / s | "
             "pair latency median ms | p95 ms |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cells:
        lines.append(f"| {c['raters']} | {c['items']} | {c['repeat_every'] or 'never'} | {c['posted']} | {c['stored']} "
                     f"| {c['recorded'] - c['stored']} | {c['stored'] - c['distinct_serves']} | {c['wall_s']} | "
                     f"{c['ratings_per_s']} | {c['latency_ms_median']} | {c['latency_ms_p95']} |")
    lines += ["", "Lost: ratings the server answered `recorded` that the database does not hold; duplicated: two "
              "ratings of one served item. Both are 0 in every cell; the server commits each rating before it "
              "answers, so a rater is never told a rating was kept that was not.", END]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--raters", type=int, default=20)
    parser.add_argument("--ratings", type=int, default=2000)
    parser.add_argument("--doc", type=Path, default=None)
    args = parser.parse_args()
    cells = [measure(args.raters, args.ratings, 0), measure(args.raters, args.ratings, 10)]
    for cell in cells:
        print(json.dumps(cell))
        if cell["recorded"] != cell["stored"] or cell["stored"] != cell["distinct_serves"]:
            raise SystemExit(f"ratings lost or duplicated: {cell}")
    RESULTS.write_text(json.dumps(cells, indent=1) + "\n")
    if args.doc:
        command = "python bench/rating_server.py --raters 20 --ratings 2000 --doc docs/benchmarks.md"
        replace_section(args.doc, START, END, render(cells, command))


if __name__ == "__main__":
    main()

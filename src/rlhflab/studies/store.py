"""A study on disk: `DIR/study.toml` (its design, written once) and `DIR/study.sqlite`.

SQLite in WAL mode is the one source of truth for everything that changes: the systems
rated, the items drawn, the raters and their tokens, each item served and each rating.
Every write is one short `BEGIN IMMEDIATE` transaction, so a rating is on disk when its
answer is sent, and a server killed at any moment loses nothing already answered.

Serving: a rater is given the item they were last served and did not answer (so leaving
and coming back resumes), else a new one: among the items they have not rated that still
need ratings (an item served to someone else counts as theirs for `SERVE_HOLD_S`), the one
with the fewest ratings so far, ties broken by an order of the
rater's own (a hash of their seed and the item), so each rater's sequence mixes steps and
systems. After every `repeat_every` new items, one they rated at least four items ago
comes back as a repeat, which measures their consistency and is left out of means and
agreement.

Every kind of study (studies/kinds) serves this way. The tables below are what all kinds
share; a kind adds columns of its own (`StudyKind.columns`), which `create` and `open` are
given, and reads and writes them through `add_systems`, `answer` and `rows`.
"""

from __future__ import annotations

import hmac
import secrets
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal, Mapping, Sequence

from rlhflab.seeding import derive_seed
from rlhflab.studies.design import DrawnItem, StepBin, StudyDesign, StudyError

DESIGN_FILE = "study.toml"
DATABASE_FILE = "study.sqlite"
SCHEMA_VERSION = 2
RaterKind = Literal["person", "bot", "tool", "judge"]  # tool: a person rating in an annotation tool (imported)
Outcome = Literal["recorded", "duplicate", "unknown", "forbidden", "invalid"]

SCHEMA = """
CREATE TABLE systems (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,          -- the name results are given under
    source TEXT NOT NULL,               -- the sample file or run it was drawn from
    format TEXT NOT NULL                -- the sample reader that read it
);
CREATE TABLE bins (
    system_id INTEGER NOT NULL REFERENCES systems(id),
    bin INTEGER NOT NULL,
    first_step INTEGER NOT NULL,
    last_step INTEGER NOT NULL,
    PRIMARY KEY (system_id, bin)
);
CREATE TABLE items (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,           -- a random name for exports: says nothing of the item's system or step
    system_id INTEGER NOT NULL REFERENCES systems(id),
    bin INTEGER NOT NULL,
    step INTEGER NOT NULL,
    prompt TEXT NOT NULL,
    response TEXT NOT NULL,
    reward REAL,                        -- the proxy the trainer optimised, where the samples hold it
    gold REAL                           -- a truth beside it, where the samples hold one
);
CREATE TABLE raters (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,                 -- person | bot | tool (imported) | judge
    token TEXT NOT NULL UNIQUE,         -- the secret in the rater's link
    seed INTEGER NOT NULL               -- the rater's own order of items
);
CREATE TABLE serves (
    id INTEGER PRIMARY KEY,
    rater_id INTEGER NOT NULL REFERENCES raters(id),
    item_id INTEGER NOT NULL REFERENCES items(id),
    nonce TEXT NOT NULL,                -- the answer's CSRF token: only the page that showed the item knows it
    repeat INTEGER NOT NULL,            -- 1: an item this rater rated before (consistency)
    served_at REAL NOT NULL,
    answered INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX serves_by_rater ON serves (rater_id, answered);
CREATE TABLE ratings (
    id INTEGER PRIMARY KEY,
    serve_id INTEGER NOT NULL UNIQUE REFERENCES serves(id),
    rater_id INTEGER NOT NULL REFERENCES raters(id),
    item_id INTEGER NOT NULL REFERENCES items(id),
    rating REAL,                        -- on the design's scale (a judge's may fall between points);
                                        -- NULL: "unreadable/broken", or a judge with no rating on the scale
    score REAL,                         -- a judge's raw output on its own scale (a reward model's score)
    repeat INTEGER NOT NULL,
    rated_at REAL NOT NULL
);
CREATE INDEX ratings_by_item ON ratings (item_id, repeat);
CREATE INDEX ratings_by_rater ON ratings (rater_id, repeat);
"""


READABLE_VERSIONS = (1, 2)
"""Schema versions a study opens from: version 1 held what version 2 holds, less columns a
kind adds when it opens the study."""


@dataclass(frozen=True)
class System:
    id: int
    name: str
    source: str
    format: str


@dataclass(frozen=True)
class Rater:
    id: int
    name: str
    kind: str
    token: str
    seed: int


@dataclass(frozen=True)
class Served:
    """An item as a rater is shown it: its row (a kind's columns included), which the page
    shows through its kind, never its run, step or position."""

    serve_id: int
    nonce: str
    repeat: bool
    item: Mapping[str, object]

    @property
    def prompt(self) -> str:
        return str(self.item["prompt"])

    @property
    def response(self) -> str:
        return str(self.item["response"])


@dataclass(frozen=True)
class Progress:
    rated: int  # new items this rater has rated (repeats not counted)
    to_go: int  # items they may still be asked to rate


@dataclass(frozen=True)
class RatingRow:
    """One rating with what results need to place it (read back for analysis only)."""

    rater_id: int
    item_id: int
    system: str
    bin: int
    step: int
    rating: float | None  # None: unreadable/broken (or a judge with a raw score only)
    repeat: bool
    rated_at: float
    serve_id: int
    score: float | None = None  # a judge's raw score


SERVE_HOLD_S = 30 * 60
"""How long an item served and not answered stays counted toward its ratings: a rater who
left is given it back when they return, but after this others may be given it too."""


class Study:
    """One study directory (module docstring). Each call opens its own connection, so a
    Study is safe to share between the threads of a web server."""

    def __init__(self, directory: Path, design: StudyDesign) -> None:
        self.directory = Path(directory)
        self.design = design
        self.serve_hold_s = SERVE_HOLD_S

    # --- create and open ----------------------------------------------------------------
    @staticmethod
    def exists(directory: Path) -> bool:
        return (Path(directory) / DATABASE_FILE).is_file()

    @classmethod
    def create(cls, directory: Path, design: StudyDesign, design_text: str, columns: Sequence[str] = ()) -> "Study":
        """A new study: `design_text` written as study.toml, the shared tables and the kind's
        `columns` ("TABLE.COLUMN TYPE" each)."""
        directory = Path(directory)
        if cls.exists(directory):
            raise StudyError(f"{directory}: a study is already there (open it, or --add samples to it)")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / DESIGN_FILE).write_text(design_text, encoding="utf-8")
        study = cls(directory, design)
        with study._connection() as conn:
            conn.executescript(SCHEMA)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        with study._write() as conn:
            _add_columns(conn, columns)
        return study

    @classmethod
    def open(cls, directory: Path, columns: Sequence[str] = ()) -> "Study":
        """The study at `directory`, the `columns` it lacks added (a study built before its
        kind had them opens as it was, with them empty)."""
        directory = Path(directory)
        if not cls.exists(directory):
            raise StudyError(f"{directory}: no study here (expected {DATABASE_FILE}; build one with "
                             "rlhflab rate SAMPLES... --study DIR)")
        study = cls(directory, StudyDesign.from_toml(directory / DESIGN_FILE))
        with study._write() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in READABLE_VERSIONS:
                raise StudyError(f"{directory / DATABASE_FILE}: schema version {version}, expected {SCHEMA_VERSION}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            _add_columns(conn, columns)
        return study

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.directory / DATABASE_FILE, timeout=30, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")  # a rating answered is a rating on disk
            conn.execute("PRAGMA foreign_keys = ON")
            yield conn
        finally:
            conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction; IMMEDIATE takes the write lock at its start, so two
        servers' threads never both read a state and then race to change it."""
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # --- systems, items and raters ------------------------------------------------------------
    def add_system(self, name: str, source: str, format_name: str, bins: Sequence[StepBin],
                   items: Sequence[DrawnItem]) -> System:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM systems WHERE name = ?", (name,)).fetchone():
                raise StudyError(f"{self.directory}: the study already has a system named {name!r}")
            system_id = conn.execute("INSERT INTO systems (name, source, format) VALUES (?, ?, ?)",
                                     (name, source, format_name)).lastrowid
            conn.executemany("INSERT INTO bins VALUES (?, ?, ?, ?)",
                             [(system_id, b.index, b.first_step, b.last_step) for b in bins])
            conn.executemany(
                "INSERT INTO items (key, system_id, bin, step, prompt, response, reward, gold) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(secrets.token_hex(8), system_id, i.bin, i.sample.step, i.sample.prompt, i.sample.response,
                  i.sample.reward, i.sample.gold) for i in items])
        return System(system_id, name, source, format_name)

    def add_systems(self, systems: Sequence[tuple[str, str, str]],
                    items: Callable[[Mapping[str, int]], Sequence[Mapping[str, object]]]) -> list[System]:
        """Systems ((name, source, format) each) and the items `items(ids by name)` gives
        (column -> value, a kind's columns included), in one transaction."""
        with self._write() as conn:
            added = []
            for name, source, format_name in systems:
                if conn.execute("SELECT 1 FROM systems WHERE name = ?", (name,)).fetchone():
                    raise StudyError(f"{self.directory}: the study already has a system named {name!r}")
                system_id = conn.execute("INSERT INTO systems (name, source, format) VALUES (?, ?, ?)",
                                         (name, source, format_name)).lastrowid
                added.append(System(system_id, name, source, format_name))
            ids = dict(conn.execute("SELECT name, id FROM systems").fetchall())
            for row in items(ids):
                columns = ["key", *row]
                conn.execute(f"INSERT INTO items ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                             (secrets.token_hex(8), *row.values()))
        return added

    def rows(self, sql: str, parameters: Sequence[object] = ()) -> list[dict]:
        """A read of the study's tables, each row as a dict (for a kind's own columns)."""
        with self._connection() as conn:
            conn.row_factory = sqlite3.Row
            return [dict(row) for row in conn.execute(sql, parameters).fetchall()]

    def systems(self) -> list[System]:
        with self._connection() as conn:
            return [System(*row) for row in conn.execute("SELECT id, name, source, format FROM systems ORDER BY id")]

    def bins(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(system, bin) -> the bin's first and last step."""
        with self._connection() as conn:
            rows = conn.execute("SELECT s.name, b.bin, b.first_step, b.last_step FROM bins b "
                                "JOIN systems s ON s.id = b.system_id")
            return {(name, index): (first, last) for name, index, first, last in rows}

    def item_count(self) -> int:
        with self._connection() as conn:
            return conn.execute("SELECT COUNT(*) FROM items").fetchone()[0]

    def add_rater(self, kind: RaterKind = "person", name: str | None = None) -> Rater:
        token = secrets.token_urlsafe(24)
        seed = secrets.randbits(62)
        with self._write() as conn:
            count = conn.execute("SELECT COUNT(*) FROM raters WHERE kind = ?", (kind,)).fetchone()[0]
            name = name or f"{kind}-{count + 1}"
            if conn.execute("SELECT 1 FROM raters WHERE name = ?", (name,)).fetchone():
                raise StudyError(f"{self.directory}: the study already has a rater named {name!r}")
            rater_id = conn.execute("INSERT INTO raters (name, kind, token, seed) VALUES (?, ?, ?, ?)",
                                    (name, kind, token, seed)).lastrowid
        return Rater(rater_id, name, kind, token, seed)

    def raters(self, kind: RaterKind | None = None) -> list[Rater]:
        with self._connection() as conn:
            rows = conn.execute("SELECT id, name, kind, token, seed FROM raters ORDER BY id").fetchall()
        return [Rater(*row) for row in rows if kind is None or row[2] == kind]

    def ensure_raters(self, count: int, kind: RaterKind = "person") -> list[Rater]:
        """At least `count` raters of `kind` (their links are kept: reopening serves the same ones)."""
        have = self.raters(kind)
        return have + [self.add_rater(kind) for _ in range(count - len(have))]

    def rater_for(self, token: str) -> Rater | None:
        """The rater whose token this is. Every stored token is compared in constant time,
        so the time taken tells nothing of how much of a guess was right."""
        found = None
        candidate = token.encode()
        for rater in self.raters():
            if hmac.compare_digest(rater.token.encode(), candidate):
                found = rater
        return found

    # --- serving and recording ------------------------------------------------------------
    def next_item(self, rater: Rater) -> Served | None:
        """The item to show `rater` now (module docstring), or None when they are done."""
        with self._write() as conn:
            conn.row_factory = sqlite3.Row
            pending = conn.execute("SELECT s.id AS serve_id, s.nonce, s.repeat, i.* "
                                   "FROM serves s JOIN items i ON i.id = s.item_id "
                                   "WHERE s.rater_id = ? AND s.answered = 0 ORDER BY s.id DESC LIMIT 1",
                                   (rater.id,)).fetchone()
            if pending:
                row = dict(pending)
                return Served(row.pop("serve_id"), row.pop("nonce"), bool(row.pop("repeat")), row)
            item_id, repeat = self._repeat_due(conn, rater), True
            if item_id is None:
                item_id, repeat = self._fresh_item(conn, rater), False
            if item_id is None:
                return None
            nonce = secrets.token_urlsafe(24)
            serve_id = conn.execute("INSERT INTO serves (rater_id, item_id, nonce, repeat, served_at) "
                                    "VALUES (?, ?, ?, ?, ?)", (rater.id, item_id, nonce, int(repeat), time.time())
                                    ).lastrowid
            item = dict(conn.execute("SELECT * FROM items WHERE id = ?", (item_id,)).fetchone())
        return Served(serve_id, nonce, repeat, item)

    def _repeat_due(self, conn: sqlite3.Connection, rater: Rater) -> int | None:
        every = self.design.repeat_every
        if not every or rater.kind == "judge":
            return None
        rated = [row[0] for row in conn.execute(
            "SELECT item_id FROM ratings WHERE rater_id = ? AND repeat = 0 ORDER BY id", (rater.id,))]
        last = conn.execute("SELECT repeat FROM ratings WHERE rater_id = ? ORDER BY id DESC LIMIT 1",
                            (rater.id,)).fetchone()
        if not rated or len(rated) % every or (last and last[0]):
            return None
        earlier = rated[:-3]  # not one still in mind
        if not earlier:
            return None
        return earlier[derive_seed(rater.seed, "repeat", str(len(rated))) % len(earlier)]

    def _fresh_item(self, conn: sqlite3.Connection, rater: Rater) -> int | None:
        """A judge rates every item; people share them out (module docstring), judges' ratings not counted."""
        rows = conn.execute(
            "SELECT i.id, "
            "  (SELECT COUNT(*) FROM ratings r JOIN raters p ON p.id = r.rater_id "
            "   WHERE r.item_id = i.id AND r.repeat = 0 AND p.kind != 'judge')"
            "  + (SELECT COUNT(*) FROM serves s JOIN raters p ON p.id = s.rater_id "
            "   WHERE s.item_id = i.id AND s.answered = 0 AND s.repeat = 0 AND p.kind != 'judge' "
            "   AND s.served_at > ?) AS taken "
            "FROM items i WHERE NOT EXISTS (SELECT 1 FROM serves s WHERE s.item_id = i.id AND s.rater_id = ?)",
            (time.time() - self.serve_hold_s, rater.id)).fetchall()
        judge = rater.kind == "judge"
        open_items = [(taken, derive_seed(rater.seed, str(item_id)), item_id) for item_id, taken in rows
                      if judge or taken < self.design.ratings_per_item]
        return min(open_items)[2] if open_items else None

    def answer(self, rater: Rater, serve_id: int, nonce: str,
               values: Callable[[Mapping[str, object]], Mapping[str, object]]) -> Outcome:
        """Store `rater`'s answer to the item served as `serve_id`, in one transaction.
        `nonce` must be the one that item was served with (the page's CSRF token);
        `values(item)` gives the answer's columns of `ratings` (rating, score, a kind's own)."""
        with self._write() as conn:
            conn.row_factory = sqlite3.Row
            row = conn.execute("SELECT s.nonce AS served_nonce, s.repeat AS served_repeat, "
                               "s.answered AS served_answered, i.* FROM serves s "
                               "JOIN items i ON i.id = s.item_id WHERE s.id = ? AND s.rater_id = ?",
                               (serve_id, rater.id)).fetchone()
            if row is None:
                return "unknown"
            item = dict(row)
            if not hmac.compare_digest(item.pop("served_nonce").encode(), nonce.encode()):
                return "forbidden"
            repeat, answered = item.pop("served_repeat"), item.pop("served_answered")
            if answered:
                return "duplicate"
            _insert_rating(conn, serve_id, rater, item["id"], repeat, values(item))
            conn.execute("UPDATE serves SET answered = 1 WHERE id = ?", (serve_id,))
        return "recorded"

    def answer_imported(self, rater: Rater, item_key: str, values: Mapping[str, object]) -> Outcome:
        """An answer given elsewhere (an annotation tool's export) to the item named `item_key`:
        served and answered in one transaction; a rater's second answer to an item is a duplicate."""
        with self._write() as conn:
            row = conn.execute("SELECT id FROM items WHERE key = ?", (item_key,)).fetchone()
            if row is None:
                return "unknown"
            if conn.execute("SELECT 1 FROM ratings WHERE rater_id = ? AND item_id = ?", (rater.id, row[0])).fetchone():
                return "duplicate"
            serve_id = conn.execute("INSERT INTO serves (rater_id, item_id, nonce, repeat, served_at, answered) "
                                    "VALUES (?, ?, ?, 0, ?, 1)", (rater.id, row[0], "imported", time.time())).lastrowid
            _insert_rating(conn, serve_id, rater, row[0], 0, values)
        return "recorded"

    def progress(self, rater: Rater) -> Progress:
        with self._connection() as conn:
            rated = conn.execute("SELECT COUNT(*) FROM ratings WHERE rater_id = ? AND repeat = 0",
                                 (rater.id,)).fetchone()[0]
            target = conn.execute("SELECT COUNT(*) FROM items").fetchone()[0] + 1 if rater.kind == "judge" \
                else self.design.ratings_per_item  # a judge rates every item
            to_go = conn.execute(
                "SELECT COUNT(*) FROM items i WHERE NOT EXISTS (SELECT 1 FROM ratings r WHERE r.item_id = i.id "
                "AND r.rater_id = ?) AND (SELECT COUNT(*) FROM ratings r JOIN raters p ON p.id = r.rater_id "
                "WHERE r.item_id = i.id AND r.repeat = 0 AND p.kind != 'judge') < ?",
                (rater.id, target)).fetchone()[0]
        return Progress(rated, to_go)

    # --- reading back ---------------------------------------------------------------------
    def ratings(self) -> list[RatingRow]:
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT r.rater_id, r.item_id, s.name, i.bin, i.step, r.rating, r.repeat, r.rated_at, r.serve_id, r.score "
                "FROM ratings r JOIN items i ON i.id = r.item_id JOIN systems s ON s.id = i.system_id "
                "ORDER BY r.id").fetchall()
        return [RatingRow(a, b, c, d, e, f, bool(g), h, k, m) for a, b, c, d, e, f, g, h, k, m in rows]

    def items(self) -> list[dict]:
        """Every item with its system's name (and a kind's columns), for analysis and export,
        never the page."""
        return self.rows("SELECT i.*, s.name AS system FROM items i JOIN systems s ON s.id = i.system_id ORDER BY i.id")


def _add_columns(conn: sqlite3.Connection, columns: Sequence[str]) -> None:
    """Each "TABLE.COLUMN TYPE" of `columns` that its table lacks, added."""
    for column in columns:
        table, _, definition = column.partition(".")
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if definition.split()[0] not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {definition}")


def _insert_rating(conn: sqlite3.Connection, serve_id: int, rater: Rater, item_id: int, repeat: int,
                   values: Mapping[str, object]) -> None:
    columns = ["serve_id", "rater_id", "item_id", "repeat", "rated_at", *values]
    conn.execute(f"INSERT INTO ratings ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                 (serve_id, rater.id, item_id, repeat, time.time(), *values.values()))

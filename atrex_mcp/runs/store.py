"""Durable run memory in one SQLite database (WAL mode) under the server's state directory.

Why SQLite: every state change of a run touches several records at once (the iteration, the
run's accepted pointer, the audit trail); a transaction makes that all-or-nothing across a
crash, and SQLite's file locking lets two server processes (two clients) write the same run
without corrupting it. Read-modify-write steps take the write lock up front (BEGIN IMMEDIATE),
so two writers serialise instead of interleaving. See docs/runs.md for the full argument.

Each call opens its own short-lived connection: safe from any thread or process, and nothing
is held open across the long evaluations that happen between reads and the final commit.

Runs and profiles belong to the client that made them (`owner`: an HTTP client's token identity,
or LOCAL_CLIENT for the one client of a stdio server). A store scoped to an owner sees only that
owner's runs and profiles; any other id is answered exactly like an id that does not exist.
"""

from __future__ import annotations

import copy
import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from atrex_mcp.errors import AtrexError
from atrex_mcp.runs.models import AuditEvent, IterationRecord, MaskRecord, RunRecord

DB_NAME = "runs.sqlite3"
LOCAL_CLIENT = "local"  # the owner of every run and profile of a stdio server (its one client)
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, op TEXT NOT NULL, shapes TEXT NOT NULL, dsl TEXT NOT NULL,
    hardware TEXT NOT NULL, workspace TEXT NOT NULL, roofline TEXT NOT NULL,
    baseline INTEGER, accepted INTEGER, created_at TEXT NOT NULL, owner TEXT NOT NULL DEFAULT 'local');
CREATE TABLE IF NOT EXISTS iterations (
    run_id TEXT NOT NULL REFERENCES runs(run_id), number INTEGER NOT NULL, kind TEXT NOT NULL,
    status TEXT NOT NULL, reason TEXT NOT NULL, plan TEXT, source TEXT NOT NULL,
    source_sha256 TEXT NOT NULL, compared_to INTEGER, checks TEXT NOT NULL, decision TEXT,
    times TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (run_id, number));
CREATE TABLE IF NOT EXISTS masks (
    mask_id TEXT PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(run_id), seed INTEGER NOT NULL,
    fraction REAL NOT NULL, eligible TEXT NOT NULL, masked TEXT NOT NULL,
    created_at TEXT NOT NULL, reverted_at TEXT);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, at TEXT NOT NULL,
    kind TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS profiles (
    profile_id TEXT PRIMARY KEY, run_id TEXT, op TEXT NOT NULL, shape TEXT NOT NULL,
    source_sha256 TEXT NOT NULL, tool TEXT NOT NULL, report TEXT NOT NULL, created_at TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT 'local');
CREATE INDEX IF NOT EXISTS events_by_run ON events(run_id, seq);
CREATE INDEX IF NOT EXISTS profiles_by_run ON profiles(run_id);
"""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def unknown_run() -> AtrexError:
    """The one answer for a run id that does not exist or is not the caller's: it names no path
    and no other run, so it tells nothing about the server's other runs."""
    return AtrexError(
        "input",
        "unknown_run",
        "Unknown run.",
        "Pass a run id that start_run returned to you; start one with start_run.",
    )


class StaleAccepted(Exception):
    """The accepted kernel changed between measuring a candidate and committing its verdict."""

    def __init__(self, current: int):
        super().__init__(f"accepted kernel is now iteration {current}")
        self.current = current


class RunStore:
    """All persistent run state. Methods are atomic; none holds a lock between calls."""

    def __init__(self, state_dir: Path | str, owner: str | None = None):
        """`owner`: the client whose runs this store sees and creates; None (the operator's own
        tools) sees every run and creates LOCAL_CLIENT's."""
        self.owner = owner
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.state_dir / DB_NAME
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise AtrexError(
                    "internal",
                    "state_too_new",
                    f"{self.path} was written by a newer atrex-mcp (schema {version}).",
                    "Upgrade atrex-mcp or point --state-dir elsewhere.",
                )
            con.executescript(_SCHEMA)
            if version == 1:  # runs and profiles of a single-client server become the local client's
                for table in ("runs", "profiles"):
                    if "owner" not in [r[1] for r in con.execute(f"PRAGMA table_info({table})")]:
                        con.execute(f"ALTER TABLE {table} ADD COLUMN owner TEXT NOT NULL DEFAULT '{LOCAL_CLIENT}'")
            con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def scoped(self, owner: str) -> RunStore:
        """The same database as `owner` sees it."""
        clone = copy.copy(self)
        clone.owner = owner
        return clone

    def _mine(self, alias: str = "") -> tuple[str, tuple[str, ...]]:
        """The SQL condition (and its argument) that keeps only this store's owner's rows."""
        return ("", ()) if self.owner is None else (f" AND {alias}owner=?", (self.owner,))

    # -- connections and transactions -------------------------------------------------
    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        try:
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA busy_timeout=60000")
            con.execute("PRAGMA synchronous=FULL")  # a commit survives power loss, not only a crash
            con.execute("PRAGMA foreign_keys=ON")
            yield con
        finally:
            con.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the database's write lock from its first statement."""
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    @staticmethod
    def _event(con: sqlite3.Connection, run_id: str, kind: str, detail: dict[str, Any]) -> None:
        con.execute(
            "INSERT INTO events(run_id, at, kind, detail) VALUES (?,?,?,?)",
            (run_id, now_iso(), kind, json.dumps(detail, sort_keys=True)),
        )

    # -- runs -----------------------------------------------------------------------
    def create_run(self, run: RunRecord) -> RunRecord:
        with self._write() as con:
            con.execute(
                "INSERT INTO runs(run_id, op, shapes, dsl, hardware, workspace, roofline, baseline, accepted, "
                "created_at, owner) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run.run_id,
                    run.op,
                    json.dumps(run.shapes),
                    run.dsl,
                    run.hardware,
                    json.dumps(run.workspace),
                    json.dumps(run.roofline),
                    None,
                    None,
                    run.created_at,
                    self.owner or LOCAL_CLIENT,
                ),
            )
            self._event(
                con,
                run.run_id,
                "run_started",
                {"op": run.op, "shapes": run.shapes, "dsl": run.dsl, "hardware": run.hardware},
            )
        return run

    @staticmethod
    def _run_from_row(row: sqlite3.Row) -> RunRecord:
        return RunRecord(
            run_id=row["run_id"],
            op=row["op"],
            shapes=json.loads(row["shapes"]),
            dsl=row["dsl"],
            hardware=row["hardware"],
            workspace=json.loads(row["workspace"]),
            roofline=json.loads(row["roofline"]),
            baseline=row["baseline"],
            accepted=row["accepted"],
            created_at=row["created_at"],
        )

    def get_run(self, run_id: str) -> RunRecord:
        with self._connect() as con:
            mine, args = self._mine()
            row = con.execute(f"SELECT * FROM runs WHERE run_id=?{mine}", (run_id, *args)).fetchone()
            if row is None:
                raise unknown_run()
            return self._run_from_row(row)

    def list_runs(self) -> list[RunRecord]:
        with self._connect() as con:
            mine, args = self._mine()
            return [
                self._run_from_row(r)
                for r in con.execute(f"SELECT * FROM runs WHERE 1{mine} ORDER BY created_at", args)
            ]

    # -- iterations -----------------------------------------------------------------
    def commit_iteration(
        self, record: IterationRecord, source: str, *, expected_accepted: int | None, check_accepted: bool = True
    ) -> IterationRecord:
        """Store one verdict. Raises StaleAccepted when the run's accepted kernel is no longer the
        one the candidate was timed against (another client won the race): the caller re-measures.
        check_accepted=False for verdicts that do not depend on the accepted kernel (a failure)."""
        with self._write() as con:
            mine, args = self._mine()
            row = con.execute(
                f"SELECT baseline, accepted FROM runs WHERE run_id=?{mine}", (record.run_id, *args)
            ).fetchone()
            if row is None:
                raise unknown_run()
            if record.kind == "baseline":
                if row["baseline"] is not None:
                    raise AtrexError(
                        "input",
                        "baseline_exists",
                        f"Run {record.run_id} already has a baseline (iteration 0).",
                        "Submit further kernels with record_iteration.",
                    )
                number = 0
            else:
                if row["baseline"] is None:
                    raise AtrexError(
                        "input",
                        "no_baseline",
                        f"Run {record.run_id} has no baseline yet.",
                        "Call submit_baseline with a first correct kernel.",
                    )
                if check_accepted and row["accepted"] != expected_accepted:
                    raise StaleAccepted(row["accepted"])
                number = (
                    con.execute("SELECT MAX(number) FROM iterations WHERE run_id=?", (record.run_id,)).fetchone()[0] + 1
                )
            stored = record.model_copy(update={"number": number, "masked": False})
            con.execute(
                "INSERT INTO iterations VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    stored.run_id,
                    number,
                    stored.kind,
                    stored.status,
                    stored.reason,
                    stored.plan.model_dump_json() if stored.plan else None,
                    source,
                    stored.source_sha256,
                    stored.compared_to,
                    json.dumps([c.model_dump() for c in stored.checks]),
                    stored.decision.model_dump_json() if stored.decision else None,
                    stored.times.model_dump_json(),
                    stored.created_at,
                ),
            )
            if stored.kind == "baseline":
                con.execute("UPDATE runs SET baseline=0, accepted=0 WHERE run_id=?", (stored.run_id,))
            elif stored.status == "accepted":
                con.execute("UPDATE runs SET accepted=? WHERE run_id=?", (number, stored.run_id))
            self._event(
                con,
                stored.run_id,
                f"{stored.kind}_{stored.status}",
                {
                    "number": number,
                    "source_sha256": stored.source_sha256,
                    "compared_to": stored.compared_to,
                    "category": stored.plan.category.value if stored.plan else None,
                    "reason": stored.reason,
                    "speedup": stored.decision.speedup if stored.decision else None,
                },
            )
        return stored

    def log_event(self, run_id: str, kind: str, detail: dict[str, Any]) -> None:
        """Audit a step that changes no other state (a refused baseline, a package)."""
        with self._write() as con:
            self._event(con, run_id, kind, detail)

    def _masked_numbers(self, con: sqlite3.Connection, run_id: str) -> set[int]:
        hidden: set[int] = set()
        for row in con.execute("SELECT masked FROM masks WHERE run_id=? AND reverted_at IS NULL", (run_id,)):
            hidden.update(json.loads(row["masked"]))
        return hidden

    @staticmethod
    def _iteration_from_row(row: sqlite3.Row, masked: set[int]) -> IterationRecord:
        return IterationRecord.model_validate(
            {
                "run_id": row["run_id"],
                "number": row["number"],
                "kind": row["kind"],
                "status": row["status"],
                "reason": row["reason"],
                "plan": json.loads(row["plan"]) if row["plan"] else None,
                "source_sha256": row["source_sha256"],
                "compared_to": row["compared_to"],
                "checks": json.loads(row["checks"]),
                "decision": json.loads(row["decision"]) if row["decision"] else None,
                "times": json.loads(row["times"]),
                "created_at": row["created_at"],
                "masked": row["number"] in masked,
            }
        )

    def iterations(self, run_id: str) -> list[IterationRecord]:
        """Every iteration of a run in order, each flagged when a live mask hides it."""
        with self._connect() as con:
            masked = self._masked_numbers(con, run_id)
            rows = con.execute("SELECT * FROM iterations WHERE run_id=? ORDER BY number", (run_id,))
            return [self._iteration_from_row(r, masked) for r in rows]

    def source(self, run_id: str, number: int) -> str:
        with self._connect() as con:
            row = con.execute("SELECT source FROM iterations WHERE run_id=? AND number=?", (run_id, number)).fetchone()
        if row is None:
            raise AtrexError("input", "unknown_iteration", f"Run {run_id} has no iteration {number}.")
        return row["source"]

    # -- masks (partial restart) ------------------------------------------------------
    def add_mask(
        self, run_id: str, seed: int, fraction: float, choose: Callable[[list[int], float, int], list[int]]
    ) -> MaskRecord:
        """Hide a seeded subset of the currently visible iteration memories. The eligible set is
        read under the write lock, so a concurrent commit cannot slip between choosing and storing."""
        with self._write() as con:
            mine, args = self._mine()
            run = con.execute(f"SELECT baseline, accepted FROM runs WHERE run_id=?{mine}", (run_id, *args)).fetchone()
            if run is None:
                raise unknown_run()
            hidden = self._masked_numbers(con, run_id)
            protected = {run["baseline"], run["accepted"]}
            eligible = [
                r[0]
                for r in con.execute("SELECT number FROM iterations WHERE run_id=? ORDER BY number", (run_id,))
                if r[0] not in protected and r[0] not in hidden
            ]
            chosen = sorted(choose(eligible, fraction, seed))
            mask = MaskRecord(
                mask_id=new_id("mask"),
                run_id=run_id,
                seed=seed,
                fraction=fraction,
                eligible=eligible,
                masked=chosen,
                created_at=now_iso(),
            )
            con.execute(
                "INSERT INTO masks VALUES (?,?,?,?,?,?,?,?)",
                (mask.mask_id, run_id, seed, fraction, json.dumps(eligible), json.dumps(chosen), mask.created_at, None),
            )
            self._event(
                con,
                run_id,
                "masked",
                {"mask_id": mask.mask_id, "seed": seed, "fraction": fraction, "eligible": eligible, "masked": chosen},
            )
        return mask

    def revert_masks(self, run_id: str, mask_id: str | None = None) -> list[MaskRecord]:
        """Undo one live mask, or all of a run's live masks when mask_id is None."""
        with self._write() as con:
            query = "SELECT * FROM masks WHERE run_id=? AND reverted_at IS NULL"
            args: tuple[Any, ...] = (run_id,)
            if mask_id is not None:
                query, args = query + " AND mask_id=?", (run_id, mask_id)
            rows = con.execute(query, args).fetchall()
            if mask_id is not None and not rows:
                raise AtrexError(
                    "input",
                    "unknown_mask",
                    "The run has no live mask with that id.",
                    "run_state lists the live mask ids.",
                )
            at = now_iso()
            reverted = []
            for row in rows:
                con.execute("UPDATE masks SET reverted_at=? WHERE mask_id=?", (at, row["mask_id"]))
                reverted.append(self._mask_from_row(row).model_copy(update={"reverted_at": at}))
                self._event(con, run_id, "unmasked", {"mask_id": row["mask_id"], "restored": json.loads(row["masked"])})
        return reverted

    @staticmethod
    def _mask_from_row(row: sqlite3.Row) -> MaskRecord:
        return MaskRecord(
            mask_id=row["mask_id"],
            run_id=row["run_id"],
            seed=row["seed"],
            fraction=row["fraction"],
            eligible=json.loads(row["eligible"]),
            masked=json.loads(row["masked"]),
            created_at=row["created_at"],
            reverted_at=row["reverted_at"],
        )

    def masks(self, run_id: str) -> list[MaskRecord]:
        with self._connect() as con:
            return [
                self._mask_from_row(r)
                for r in con.execute("SELECT * FROM masks WHERE run_id=? ORDER BY created_at", (run_id,))
            ]

    # -- audit trail ----------------------------------------------------------------
    def events(self, run_id: str) -> list[AuditEvent]:
        with self._connect() as con:
            return [
                AuditEvent(seq=r["seq"], run_id=r["run_id"], at=r["at"], kind=r["kind"], detail=json.loads(r["detail"]))
                for r in con.execute("SELECT * FROM events WHERE run_id=? ORDER BY seq", (run_id,))
            ]

    # -- profiles -------------------------------------------------------------------
    def save_profile(
        self, *, op: str, shape: str, source_sha256: str, tool: str, report: dict[str, Any], run_id: str | None = None
    ) -> str:
        profile_id = new_id("prof")
        if run_id is not None:
            self.get_run(run_id)  # another client's run is unknown here
        with self._write() as con:
            con.execute(
                "INSERT INTO profiles(profile_id, run_id, op, shape, source_sha256, tool, report, created_at, owner)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    profile_id,
                    run_id,
                    op,
                    shape,
                    source_sha256,
                    tool,
                    json.dumps(report),
                    now_iso(),
                    self.owner or LOCAL_CLIENT,
                ),
            )
            if run_id is not None:
                self._event(
                    con,
                    run_id,
                    "profile_stored",
                    {"profile_id": profile_id, "shape": shape, "tool": tool, "source_sha256": source_sha256},
                )
        return profile_id

    def get_profile(self, profile_id: str) -> dict[str, Any]:
        with self._connect() as con:
            mine, args = self._mine()
            row = con.execute(f"SELECT * FROM profiles WHERE profile_id=?{mine}", (profile_id, *args)).fetchone()
        if row is None:
            raise AtrexError(
                "input", "unknown_profile", "No stored profile has that id.", "Cite ids returned by profile_kernel."
            )
        return {
            "profile_id": row["profile_id"],
            "run_id": row["run_id"],
            "op": row["op"],
            "shape": row["shape"],
            "source_sha256": row["source_sha256"],
            "tool": row["tool"],
            "created_at": row["created_at"],
            "report": json.loads(row["report"]),
        }

    def profile_ops(self, profile_ids: list[str]) -> dict[str, str]:
        """Operator of each stored profile among the given ids (missing ids are absent)."""
        if not profile_ids:
            return {}
        with self._connect() as con:
            marks = ",".join("?" * len(profile_ids))
            mine, args = self._mine()
            return {
                r[0]: r[1]
                for r in con.execute(
                    f"SELECT profile_id, op FROM profiles WHERE profile_id IN ({marks}){mine}", (*profile_ids, *args)
                )
            }

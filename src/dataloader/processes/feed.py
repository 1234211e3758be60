"""The event feed of a namespace: every event and lifecycle change (init, repair, error, remove,
import), durable and ordered, read with a resumable cursor.

Rows are written in the transaction of the step (or API change) that produced them, each with the
id of that transaction (xid8). A page serves only rows whose transaction is older than every
transaction still running (`read_feed.sql`), in (xid, seq) order, so:

- a subscriber never sees a row that was rolled back (it never committed, so it is not there);
- it never misses one that committed: a transaction that commits after the cursor moved has an
  xid at or above the xmin the cursor was read under, so it sorts after the cursor. (A bigserial
  cursor alone would skip it: ids are taken in one order and commit in another.)

The price: a row is served once every older transaction has ended, so one long transaction on the
database delays the feed (never reorders or loses it). Order is per process the order of its
steps (they run one at a time); across processes it is the order their transactions began
writing.

The cursor is `<xid>.<seq>` of the last row read; "0.0" (or none) reads from the start.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dataloader.exceptions import InvalidCursor
from dataloader.model.clock import iso
from dataloader.model.payload_crypto import shown
from dataloader.processes.waiter import DISCONNECTED_POLL_SEC, FEED_CHANNEL, TaskWaiter
from dataloader.storage.process_repository import ProcessRepository

log = logging.getLogger("dataloader.processes")

CHANNEL = FEED_CHANNEL  # NOTIFY dl_process_feed, '<ns>' as a row commits; heard by the App's TaskWaiter
_CURSOR = re.compile(r"^(\d{1,20})\.(\d{1,19})$")
START = "0.0"
# A follower whose rows are held back by an older open transaction re-reads this often.
HELD_BACK_POLL_SEC = 0.1


@dataclass(frozen=True, slots=True)
class FeedItem:
    cursor: str
    ns: str
    process_id: str
    kind: str  # event, init, repair, error, remove, import
    event_id: int | None
    task_id: uuid.UUID | None
    timestamp: datetime
    payload: Any
    metadata: Any

    @classmethod
    def from_row(cls, row: Any) -> FeedItem:
        return cls(cursor=f"{row['xid']}.{row['seq']}", ns=row["ns"], process_id=row["process_id"], kind=row["kind"],
                   event_id=row["event_id"], task_id=row["task_id"], timestamp=row["ts"], payload=row["payload"],
                   metadata=row["metadata"])

    def to_dict(self) -> dict[str, Any]:
        return {"cursor": self.cursor, "ns": self.ns, "process_id": self.process_id, "kind": self.kind,
                "event_id": self.event_id, "task_id": str(self.task_id) if self.task_id else None,
                "timestamp": iso(self.timestamp), "payload": self.payload, "metadata": self.metadata}


@dataclass(frozen=True, slots=True)
class FeedPage:
    items: list[FeedItem]
    cursor: str  # where the next read starts (the given cursor when nothing new was served)

    def to_dict(self) -> dict[str, Any]:
        return {"items": [i.to_dict() for i in self.items], "cursor": self.cursor}


def parse_cursor(cursor: str | None) -> tuple[int, int]:
    if cursor is None or cursor == "":
        return 0, 0
    match = _CURSOR.fullmatch(cursor) if isinstance(cursor, str) else None
    if match is None or int(match.group(1)) >= 2**64 or int(match.group(2)) >= 2**63:
        raise InvalidCursor("feed cursor is not one this API returned ('<xid>.<seq>'); start again from '0.0'")
    return int(match.group(1)), int(match.group(2))


async def read_page(repo: ProcessRepository, ns: str, cursor: str | None, limit: int) -> FeedPage:
    xid, seq = parse_cursor(cursor)
    rows = await repo.read_feed(ns, xid, seq, limit)
    # payloads masked for a principal without READ_PAYLOAD (model/payload_crypto.py)
    items = [shown(FeedItem.from_row(r), "payload") for r in rows]
    return FeedPage(items, items[-1].cursor if items else f"{xid}.{seq}")


async def follow(repo: ProcessRepository, listener: TaskWaiter, ns: str, cursor: str | None, *, batch: int = 100,
                 poll_sec: float = 10.0, stop: asyncio.Event | None = None) -> AsyncIterator[FeedItem]:
    """Yield the namespace's feed from `cursor` on, forever (until `stop`): wake on the App's one
    listening session (`listener`, shared by every follower and caller: a follower holds no
    connection of its own), re-read at once on a notification, soon while rows are held back by an
    older transaction, and every `poll_sec` anyway (lost notifications; every second while the
    listener is down)."""
    parse_cursor(cursor)
    await listener.start()
    with listener.feed_subscription(ns) as wake:
        current = cursor or START
        while stop is None or not stop.is_set():
            wake.clear()
            page = await read_page(repo, ns, current, batch)
            for item in page.items:
                yield item
            current = page.cursor
            if len(page.items) == batch:
                continue
            xid, seq = parse_cursor(current)
            if await repo.feed_held_back(ns, xid, seq):
                wait = HELD_BACK_POLL_SEC
            else:
                wait = poll_sec if listener.listening else min(poll_sec, DISCONNECTED_POLL_SEC)
            waiters = [asyncio.ensure_future(wake.wait())]
            if stop is not None:
                waiters.append(asyncio.ensure_future(stop.wait()))
            try:
                await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            finally:
                # Also when the follower itself is cancelled or closed here (an SSE client that
                # hung up): a waiter left pending is "Task was destroyed but it is pending" later.
                for waiter in waiters:
                    waiter.cancel()
            if not listener.listening:
                await listener.start()

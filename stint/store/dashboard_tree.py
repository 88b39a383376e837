"""A session's tree of child sessions, as its dashboard page draws it: bounded.

A parent may have thousands of children (the delegation case: 1,000 in two
levels), and a page that listed them all would be megabytes. The tree is read
level by level, breadth first, within ``TreeBounds``: so many levels below the
session, so many children under one session, so many sessions in all, each
session counting its children only up to a cap. Whatever is left out is a
count ("N more") on the session it hangs from, so the page says what it does
not show. One statement per level (``dashboard_children_level``), at most
``levels + 1`` of them, each bounded by the sessions already shown.

The tree is tenant-checked at every level: a tenant's reader passes its tenant
and another tenant's session has no tree; a child has its parent's tenant.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from uuid import UUID

from stint.store.config import StoreConfig
from stint.store.fetch import fetch_all
from stint.store.pool import Pool
from stint.store.translate import guarded

__all__ = ["ChildNode", "ChildTree", "TreeBounds", "read_children_tree"]


@dataclass(frozen=True)
class TreeBounds:
    """How much of a tree one page shows."""

    levels: int = 3  # levels below the session
    per_parent: int = 20  # children shown under one session
    sessions: int = 100  # sessions shown in all
    count_cap: int = 10_000  # children counted under one session, at most


@dataclass(frozen=True)
class ChildNode:
    """One child session: what it is, and the part of its own children shown."""

    session_id: UUID
    depth: int  # below a client's session (the sessions row's depth)
    on_cancel: str  # what a cancel of its parent does to it: cascade or abandon
    session_status: str
    turn_seq: int | None  # its latest turn (None: pruned, or none yet)
    turn_status: str | None
    children: tuple[ChildNode, ...]
    total: int  # its children, counted up to the cap

    @property
    def more(self) -> int:
        """Children of this session the page leaves out."""
        return self.total - len(self.children)


@dataclass(frozen=True)
class ChildTree:
    """The children of one session, each with the part of its subtree shown."""

    children: tuple[ChildNode, ...]
    total: int  # the session's children, counted up to ``bounds.count_cap``
    bounds: TreeBounds

    @property
    def more(self) -> int:
        return self.total - len(self.children)

    def capped(self, total: int) -> bool:
        """Was ``total`` counted only up to the cap (there may be more)?"""
        return total >= self.bounds.count_cap


@dataclass(frozen=True)
class _LevelRow:
    parent_id: UUID
    total: int
    child_id: UUID | None
    on_cancel: str | None
    depth: int | None
    session_status: str | None
    turn_seq: int | None
    turn_status: str | None


async def read_children_tree(
    config: StoreConfig,
    pool: Pool,
    *,
    session_id: UUID,
    tenant: str | None,
    bounds: TreeBounds,
) -> ChildTree:
    """The children of ``session_id`` within ``bounds`` (another tenant's: none)."""
    shown: dict[UUID, list[_LevelRow]] = defaultdict(list)
    totals: dict[UUID, int] = {}
    parents, level, room = [session_id], 1, bounds.sessions
    async with guarded("dashboard_children_level", config), pool.connection() as conn:
        while parents:
            expand = level <= bounds.levels and room > 0
            rows = await fetch_all(
                conn,
                _LevelRow,
                "dashboard_children_level",
                parents=parents,
                per_parent=min(bounds.per_parent, room) if expand else 0,
                count_cap=bounds.count_cap,
                tenant=tenant,
            )
            parents = []
            for row in rows:
                totals[row.parent_id] = row.total
                if row.child_id is not None and room > 0:
                    shown[row.parent_id].append(row)
                    parents.append(row.child_id)
                    room -= 1
            if not expand:
                break
            level += 1

    def node(row: _LevelRow) -> ChildNode:
        assert row.child_id is not None and row.on_cancel is not None
        assert row.depth is not None and row.session_status is not None
        return ChildNode(
            session_id=row.child_id,
            depth=row.depth,
            on_cancel=row.on_cancel,
            session_status=row.session_status,
            turn_seq=row.turn_seq,
            turn_status=row.turn_status,
            children=tuple(node(r) for r in shown.get(row.child_id, ())),
            total=totals.get(row.child_id, 0),
        )

    return ChildTree(
        children=tuple(node(r) for r in shown.get(session_id, ())),
        total=totals.get(session_id, 0),
        bounds=bounds,
    )

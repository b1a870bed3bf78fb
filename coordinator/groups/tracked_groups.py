"""The coordinator's groups by id, as a dict that tells a listener about every group it is given.

The group overview keeps an index of group ids up to date from it (`reports.overview.GroupIdIndex`)
instead of rebuilding one per page; whoever stores a group needs to know nothing about that.
"""
from __future__ import annotations

from collections.abc import Callable


class TrackedGroups(dict):
    """A dict of groups by id whose `listener(group_id)` hears of each group stored (a new id or a new
    group under an old one); reads cost what a dict's cost."""

    __slots__ = ("listener",)

    def __init__(self) -> None:
        super().__init__()
        self.listener: Callable[[str], None] | None = None

    def __setitem__(self, group_id: str, group) -> None:
        dict.__setitem__(self, group_id, group)
        if self.listener is not None:
            self.listener(group_id)

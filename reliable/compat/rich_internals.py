"""rich's private list of a table column's cells.

`Column._cells` holds what `Table.add_row` added; `Column.cells` only reads it. Read in rich
13.0.0, 13.9.4, 14.0.0, 14.1.0, 14.2.0 and 14.3.0 (tags), tested on the installed 15.0. Fallback:
the cells are left as added (a `str` cell is then rich markup, as rich prints it).
"""

from __future__ import annotations

from importlib.metadata import version

from rich.table import Column
from rich.text import Text

from . import release

__all__ = ["RICH_VERIFIED", "VERIFIED_RICH", "plain_cells"]

#: The rich releases whose Column keeps its cells in `_cells`.
VERIFIED_RICH = frozenset({"13.0", "13.1", "13.2", "13.3", "13.4", "13.5", "13.6", "13.7", "13.8", "13.9",
                           "14.0", "14.1", "14.2", "14.3", "15.0"})
#: The installed rich is one of them.
RICH_VERIFIED = release(version("rich")) in VERIFIED_RICH


def plain_cells(column: Column) -> None:
    """Make every `str` cell of `column` plain text, never rich markup: "[/]" in a cell prints."""
    if RICH_VERIFIED and isinstance(getattr(column, "_cells", None), list):
        column._cells = [Text(cell) if isinstance(cell, str) else cell for cell in column._cells]

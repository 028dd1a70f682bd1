"""What the CLI commands share: the store they read, time parsing and formatting, and error handling."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import click

if TYPE_CHECKING:
    from scaffold.store._store import Store


class StoreHandle:
    """The ``--store`` target, opened on first use (``--help`` opens nothing) and closed when the CLI exits."""

    def __init__(self, target: str | None, origin: str) -> None:
        self.target = target
        self.origin = origin
        """Where the target came from: ``--store``, ``$SCAFFOLD_STORE`` or the default ``./scaffold.db``."""
        self._store: Store | None = None

    def open(self) -> Store:
        if self._store is not None:
            return self._store
        target = self.target
        if target is None:
            raise click.ClickException("$SCAFFOLD_STORE turns the store off; pass --store PATH_OR_URL")
        path = _sqlite_path(target)
        if path is not None and not path.exists():
            raise click.ClickException(f"no store at {path} ({self.origin}); pass --store PATH_OR_URL "
                                       "or set $SCAFFOLD_STORE")
        from sqlalchemy.exc import SQLAlchemyError

        from scaffold._errors import StoreError
        from scaffold.store._store import Store

        try:
            self._store = Store(target)
        except ImportError as exc:
            hint = ("PostgreSQL needs pip install 'scaffold-sdk[postgres]'" if "psycopg" in str(exc)
                    else "the store supports SQLite and PostgreSQL")
            message = f"cannot open the store {target}: {exc} ({hint})"
        except StoreError as exc:
            message = str(exc)
        except (SQLAlchemyError, ValueError) as exc:
            message = f"cannot open the store {target}: not a valid path or database URL ({exc})"
        else:
            return self._store
        raise click.ClickException(self.redact(message))

    def close(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            store.close()

    def redact(self, message: str) -> str:
        """``message`` without the store URL's password (errors may quote the URL as given)."""
        return redact(message, self.target)


def _sqlite_path(target: str) -> Path | None:
    """The file of a SQLite target (a plain path or ``sqlite:///path``), ``None`` for other databases."""
    if "://" not in target:
        return Path(target).expanduser()
    if target.startswith("sqlite:///"):
        database = target[len("sqlite:///"):].split("?", 1)[0]
        return Path(database).expanduser() if database and database != ":memory:" else None
    return None


_PASSWORD = re.compile(r"://[^:/@\s]*:([^@\s]*)@")


def redact(message: str, target: str | None) -> str:
    """``message`` with the password of the URL ``target`` (raw or percent-decoded) replaced by ``***``."""
    if not target:
        return message
    found = _PASSWORD.search(target)
    if found is None or not found.group(1):
        return message
    for secret in sorted({found.group(1), unquote(found.group(1))}, key=len, reverse=True):
        message = message.replace(secret, "***")
    return message


# -- times ------------------------------------------------------------------------------------
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|sec|secs|m|min|mins|h|hr|hrs|d|day|days|w|wk|wks)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds from an ISO date or time (local time unless it has an offset) or a time ago.

    >>> parse_time("2h", now=10_000.0)
    2800.0
    >>> parse_time("30m", now=10_000.0), parse_time("7d", now=1e6)
    (8200.0, 395200.0)
    >>> parse_time("2024-05-01T12:00:00+00:00")
    1714564800.0
    """
    value = text.strip().lower()
    now = time.time() if now is None else now
    if value == "now":
        return now
    relative = _RELATIVE.match(value)
    if relative is not None:
        return now - float(relative.group(1)) * _UNITS[relative.group(2)[0]]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use an ISO date or time (2024-05-01, 2024-05-01T14:30) "
                         "or a time ago (45s, 30m, 2h, 7d, 2w)") from None


class TimeType(click.ParamType):
    """A ``--since`` / ``--until`` value: ISO date or time, or a time ago like ``2h``; converted to Unix seconds."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


# -- formatting -------------------------------------------------------------------------------
def fmt_cost(cost: float | None) -> str:
    """Dollars, ``?`` when unknown."""
    if cost is None:
        return "?"
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def fmt_duration(seconds: float | None) -> str:
    """``850ms``, ``12.30s``, ``4m05s``, ``2h03m``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms" if seconds >= 0.0005 else f"{seconds * 1000:.2f}ms"
    if seconds < 60:
        return f"{seconds:.2f}s"
    if seconds < 3600:
        minutes, rest = divmod(int(round(seconds)), 60)
        return f"{minutes}m{rest:02d}s"
    hours, rest = divmod(int(round(seconds)) // 60, 60)
    return f"{hours}h{rest:02d}m"


def fmt_time(timestamp: float | None) -> str:
    """Local date and time to the second."""
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def shorten(text: Any, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with ``...``."""
    if text is None:
        return "-"
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[:max(0, width - 3)] + "..."


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = (), indent: str = "") -> str:
    """A plain text table; columns listed in ``right`` are right-aligned (numbers)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    lines = []
    for row in (header, *rows):
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append((indent + "  ".join(cells)).rstrip())
    return "\n".join(lines)

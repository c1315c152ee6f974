"""A guarded write's own part: what it sets and the state it requires."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union

from ._names import quote


@dataclass(frozen=True)
class _Bound:
    value: Any


@dataclass(frozen=True)
class _Sql:
    text: str


@dataclass(frozen=True)
class _Equals:
    column: str
    value: Any


@dataclass(frozen=True)
class _In:
    column: str
    values: Tuple[Any, ...]


_Value = Union[_Bound, _Sql]
_Condition = Union[_Equals, _In, _Sql]


class Update:
    """What one guarded ``UPDATE`` sets, and the state precondition added to its fence
    condition::

        Update(set={"status": "SENT"}, when={"status": "PENDING"})
        Update().set_sql("sends", '"sends" + 1').set("sent_by", fence)

    Values are bound parameters. The ``*_sql`` methods take SQL text the program itself
    writes (like any query string), never input; on PostgreSQL it goes to the server as
    written (no ``%`` escaping).
    """

    def __init__(self, *, set: Optional[Mapping[str, Any]] = None, when: Optional[Mapping[str, Any]] = None) -> None:
        self._sets: List[Tuple[str, _Value]] = [(column, _Bound(value)) for column, value in (set or {}).items()]
        self._conditions: List[_Condition] = [_Equals(column, value) for column, value in (when or {}).items()]

    def set(self, column: str, value: Any) -> Update:
        """Sets ``column`` to a bound value."""
        self._sets.append((column, _Bound(value)))
        return self

    def set_sql(self, column: str, expression: str) -> Update:
        """Sets ``column`` to an SQL expression, e.g. ``set_sql("sends", '"sends" + 1')``."""
        self._sets.append((column, _Sql(expression)))
        return self

    def when(self, column: str, value: Any) -> Update:
        """Requires ``column = value`` (the lesson's ``status = 'PENDING'``)."""
        self._conditions.append(_Equals(column, value))
        return self

    def when_in(self, column: str, values: Sequence[Any]) -> Update:
        """Requires ``column`` to be one of ``values``; no values match no row."""
        self._conditions.append(_In(column, tuple(values)))
        return self

    def when_sql(self, predicate: str) -> Update:
        """Requires an SQL predicate, e.g. ``when_sql('"amount_cents" > 0')``."""
        self._conditions.append(_Sql(predicate))
        return self

    @property
    def has_precondition(self) -> bool:
        """Whether the write requires a state (then no row matched at a current fence means
        the state moved on, not a missing row)."""
        return bool(self._conditions)

    @property
    def columns(self) -> Tuple[str, ...]:
        """The columns it sets and compares, as given (SQLite's helpers check them against the
        table)."""
        compared = [c.column for c in self._conditions if isinstance(c, (_Equals, _In))]
        return (*(column for column, _ in self._sets), *compared)

    def render(self, placeholder: Callable[[int], str], first: int) -> Tuple[List[str], List[str], List[Any]]:
        """The ``SET`` list (without the fence), the precondition clauses, and the values they
        bind in order, with placeholders numbered from ``first``."""
        params: List[Any] = []

        def bind(value: Any) -> str:
            params.append(value)
            return placeholder(first + len(params) - 1)

        sets = []
        for column, value in self._sets:
            rendered = bind(value.value) if isinstance(value, _Bound) else f"({value.text})"
            sets.append(f"{quote(column)} = {rendered}")
        conditions = []
        for condition in self._conditions:
            if isinstance(condition, _Equals):
                conditions.append(f"{quote(condition.column)} = {bind(condition.value)}")
            elif isinstance(condition, _In):
                column = quote(condition.column)
                listed = ", ".join(bind(value) for value in condition.values)
                conditions.append(f"{column} IN ({listed})" if condition.values else "FALSE")
            else:
                conditions.append(f"({condition.text})")
        return sets, conditions, params

    def __repr__(self) -> str:
        return f"Update(sets={[c for c, _ in self._sets]!r}, conditions={len(self._conditions)})"

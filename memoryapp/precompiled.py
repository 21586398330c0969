"""Querysets compiled to SQL once per process, for the lookups every request of the hot path makes.

Django builds and compiles a queryset's SQL anew on each evaluation: for the thread an append
locks (`thread_for_agent`), that was ~20% of a single append's web CPU, more than the query's round
trip (issue 26). `Precompiled` compiles the queryset once, with stand-in parameters, and then only
executes the SQL with the caller's and builds the rows as the ORM would (its converters, `from_db`).

The stand-ins must come back from the compiler as the statement's parameters, in their order and
nothing else (no parameter the ORM adds or changes on the way to SQL): checked at the first use;
when they do not, the queryset is evaluated through the ORM every time (slower, never wrong).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connections, models
from django.db.transaction import TransactionManagementError

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=models.Model)


@dataclass(frozen=True)
class _Compiled:
    sql: str
    db: str
    model: type[models.Model]
    start: int
    end: int
    init_list: list[str]
    converters: list[tuple[int, tuple[list[Any], Any]]]
    # select_for_update: the ORM refuses it outside a transaction when it compiles it (each time); a
    # statement compiled once must refuse it each time too.
    for_update: bool = False


class Precompiled(Generic[M]):
    """`Precompiled(build, *stand_ins)`: `rows(*params)` is `list(build(*params))`, its SQL compiled
    once. `build` returns a queryset of model rows (no select_related, annotations or values())
    whose SQL parameters are exactly its arguments, in order; each stand-in is a value of the kind the
    caller passes that no caller passes (it is compiled, never sent)."""

    def __init__(self, build: Callable[..., models.QuerySet[M]], *stand_ins: Any) -> None:
        self._build = build
        self._stand_ins = stand_ins
        self._compiled: _Compiled | None = None
        self._refused = False
        self._lock = threading.Lock()

    def _compile(self) -> _Compiled | None:
        with self._lock:
            if self._compiled is not None or self._refused:
                return self._compiled
            queryset = self._build(*self._stand_ins)
            compiler = queryset.query.get_compiler(using=queryset.db)
            sql, params = compiler.as_sql()
            klass_info = compiler.klass_info
            if (
                tuple(params) != self._stand_ins
                or not klass_info
                or klass_info.get("related_klass_infos")
                or compiler.annotation_col_map
                or queryset._iterable_class is not models.query.ModelIterable
            ):
                logger.warning("%s: not precompiled (its parameters are not its arguments)", queryset.model.__name__)
                self._refused = True
                return None
            select = compiler.select
            fields = klass_info["select_fields"]
            start, end = fields[0], fields[-1] + 1
            converters = compiler.get_converters([column[0] for column in select])
            self._compiled = _Compiled(
                sql=sql,
                db=queryset.db,
                model=klass_info["model"],
                start=start,
                end=end,
                init_list=[column[0].target.attname for column in select[start:end]],
                converters=sorted(converters.items()),
                for_update=bool(queryset.query.select_for_update),
            )
            return self._compiled

    def rows(self, *params: Any) -> list[M]:
        compiled = self._compiled or self._compile()
        if compiled is None:
            return list(self._build(*params))
        connection = connections[compiled.db]
        if compiled.for_update and connection.get_autocommit():
            # As the ORM: a lock taken in autocommit would end with its statement, locking nothing.
            raise TransactionManagementError("select_for_update cannot be used outside of a transaction.")
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            fetched = cursor.fetchall()
        found: list[M] = []
        for raw in fetched:
            values = list(raw)
            for at, (functions, expression) in compiled.converters:
                value = values[at]
                for function in functions:
                    value = function(value, expression, connection)
                values[at] = value
            found.append(
                compiled.model.from_db(compiled.db, compiled.init_list, values[compiled.start : compiled.end])  # type: ignore[arg-type]
            )
        return found

    def first(self, *params: Any) -> M | None:
        """The first row of `rows` (the queryset's own order; slice it [:1] in `build`), or None."""
        found = self.rows(*params)
        return found[0] if found else None

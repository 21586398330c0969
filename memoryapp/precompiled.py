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

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from django.db import connections, models
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init
from django.db.transaction import TransactionManagementError
from psycopg import ClientCursor

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=models.Model)

# Stand-ins for a scope's arguments (agent id, user id, project id, thread id, and two times), and
# their twins: values no caller passes, for statements read over a memory scope (the items' facts,
# the search's items check).
SCOPE_STAND_INS = (
    -26,
    "\x00user",
    "\x00project",
    "\x00thread",
    datetime(1901, 1, 1, tzinfo=UTC),
    datetime(1902, 1, 1, tzinfo=UTC),
)
SCOPE_TWINS = (
    -27,
    "\x00user2",
    "\x00project2",
    "\x00thread2",
    datetime(1903, 1, 1, tzinfo=UTC),
    datetime(1904, 1, 1, tzinfo=UTC),
)


@dataclass(frozen=True)
class _Compiled:
    sql: str
    db: str
    model: type[models.Model]
    start: int
    end: int
    init_list: list[str]
    converters: list[tuple[int, tuple[list[Any], Any]]]
    # For each parameter of the statement: the index of the caller's argument it is, or None for a
    # constant of the queryset (`constants[i]`). None: the parameters are the arguments, in order.
    slots: tuple[int | None, ...] | None = None
    constants: tuple[Any, ...] = ()
    # select_for_update: the ORM refuses it outside a transaction when it compiles it (each time); a
    # statement compiled once must refuse it each time too.
    for_update: bool = False


class Precompiled(Generic[M]):
    """`Precompiled(build, *stand_ins)`: `rows(*params)` is `list(build(*params))`, its SQL compiled
    once. `build` returns a queryset of model rows (no select_related, annotations or values())
    whose SQL parameters are exactly its arguments, in order; each stand-in is a value of the kind the
    caller passes that no caller passes (it is compiled, never sent)."""

    def __init__(self, build: Callable[..., models.QuerySet[M]], *stand_ins: Any, twins: tuple[Any, ...] = ()) -> None:
        self._build = build
        self._stand_ins = stand_ins
        # A second set of stand-ins (as many, each different from its first): the queryset is
        # compiled with both, and a parameter equal in both compilations (and no stand-in) is a
        # constant of the queryset ('' of a scope's IN list, a status): a parameter that is neither
        # an argument nor the same both times (a clock read inside `build`) refuses it.
        self._twins = twins
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
            slots, constants = self._slots(sql, tuple(params))
            if (
                slots is None
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
                slots=None if slots == tuple(range(len(self._stand_ins))) and not constants else slots,
                constants=constants,
            )
            return self._compiled

    def _slots(self, sql: str, params: tuple[Any, ...]) -> tuple[tuple[int | None, ...] | None, tuple[Any, ...]]:
        """Where each parameter comes from (see `_Compiled.slots`); (None, ()) when it cannot be told."""
        if not self._twins:
            return (tuple(range(len(params))), ()) if params == self._stand_ins else (None, ())
        if len(self._twins) != len(self._stand_ins) or any(
            a == b for a, b in zip(self._stand_ins, self._twins, strict=True)
        ):
            return None, ()
        twin = self._build(*self._twins)
        twin_sql, twin_params = twin.query.get_compiler(using=twin.db).as_sql()
        if twin_sql != sql or len(twin_params) != len(params):
            return None, ()
        slots: list[int | None] = []
        constants: list[Any] = []
        for first, second in zip(params, twin_params, strict=True):
            at = [i for i, v in enumerate(self._stand_ins) if _same(v, first)]
            if at and len(at) == 1 and _same(self._twins[at[0]], second):
                slots.append(at[0])
                constants.append(None)
            elif not at and _same(first, second) and not any(_same(v, second) for v in self._twins):
                slots.append(None)
                constants.append(first)
            else:
                return None, ()
        return tuple(slots), tuple(constants)

    def rows(self, *params: Any) -> list[M]:
        statement = self.statement(*params)
        if statement is None:
            return list(self._build(*params))
        with connections[statement[0]].cursor() as cursor:
            cursor.execute(statement[1], statement[2])
            fetched = cursor.fetchall()
        return self.built(fetched)

    def statement(self, *params: Any) -> tuple[str, str, tuple[Any, ...]] | None:
        """The database, SQL and parameters `rows(*params)` sends (for a caller that sends it with
        others, `read_together`, and builds its rows with `built`); None when the queryset is not
        precompiled (then only `rows` reads it, through the ORM)."""
        compiled = self._compiled or self._compile()
        if compiled is None:
            return None
        if compiled.for_update and connections[compiled.db].get_autocommit():
            # As the ORM: a lock taken in autocommit would end with its statement, locking nothing.
            raise TransactionManagementError("select_for_update cannot be used outside of a transaction.")
        if compiled.slots is not None:
            params = tuple(
                params[slot] if slot is not None else constant
                for slot, constant in zip(compiled.slots, compiled.constants, strict=True)
            )
        return compiled.db, compiled.sql, params

    def built(self, fetched: Sequence[Sequence[Any]]) -> list[M]:
        """The model rows of the rows `statement`'s SQL fetched, as the ORM builds them."""
        compiled = self._compiled or self._compile()
        assert compiled is not None, "built() of a statement() that was None"
        connection = connections[compiled.db]
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


def read_together(
    using: str, statements: Sequence[tuple[str, Sequence[Any] | Mapping[str, Any]]]
) -> list[list[tuple[Any, ...]]]:
    """The rows each of these reads fetches, all sent in one round trip (issue 26: a context build's
    reads that return nothing most of the time were a round trip each). The service's connections bind
    parameters on the client (settings refuse the server-side binding), so the statements, their
    parameters bound as the cursor binds them, go as one string: PostgreSQL runs them in turn, in
    one transaction when no caller's is open (a failure of one fails them all, as one raises here).
    Reads only: a statement's result is the rows it returns."""
    connection = connections[using]
    connection.ensure_connection()
    binder = ClientCursor(connection.connection)
    try:
        text = "; ".join(binder.mogrify(sql, params) for sql, params in statements)
    finally:
        binder.close()
    found: list[list[tuple[Any, ...]]] = []
    with connection.cursor() as cursor:
        cursor.execute(text)
        found.append(list(cursor.fetchall()))
        while cursor.nextset():
            found.append(list(cursor.fetchall()))
    if len(found) != len(statements):
        raise RuntimeError(f"read_together: {len(statements)} statements sent, {len(found)} results")
    return found


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same type (a stand-in 1 is not the constant True)."""
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class _Returned:
    db: str
    columns: tuple[str, ...]
    init_list: list[str]
    converters: list[tuple[int, tuple[list[Any], Any]]]
    # Whether a row's values may be put in place (`_in_place`) rather than given to `from_db`.
    in_place: bool


# The descriptors Django puts on a model's field attributes that store any value as it is given: a
# plain field's (it only reads) and a foreign key's id (it drops the related object cached on the
# instance when the id changes, and a new instance caches none).
_PLAIN_DESCRIPTORS = (DeferredAttribute, ForeignKeyDeferredAttribute)


@functools.cache
def _in_place_possible(model: type[models.Model], init_list: tuple[str, ...]) -> bool:
    """Whether `from_db(db, init_list, values)` leaves nothing but what `_in_place` leaves: concrete
    fields given once each (the others deferred, as from_db leaves them), Django's own `from_db` and
    `__init__`, and no field whose class attribute does more with a value than store it. The init
    signals' listeners are looked at by `_in_place` itself (one may be connected later)."""
    return (
        len(set(init_list)) == len(init_list)
        and set(init_list) <= {field.attname for field in model._meta.concrete_fields}
        and getattr(model.from_db, "__func__", None) is getattr(models.Model.from_db, "__func__", None)
        and model.__init__ is models.Model.__init__
        and all(type(getattr(model, name, None)) in _PLAIN_DESCRIPTORS for name in init_list)
    )


def _in_place(model: type[M], db: str, init_list: list[str], values: list[Any]) -> M:
    """`model.from_db(db, init_list, values)` for a model `_in_place_possible` accepts, its values put
    in place: Model.__init__ by position sets each through setattr and sends pre_init and post_init
    (the single append's thread, 21 columns: ~14 us against ~10 us, issue 26). What it leaves is what
    from_db leaves: a state of its own (not adding, of `db`), each field's value under its attribute
    name. With a listener of either init signal: from_db itself."""
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        return _from_db(model, db, init_list, values)
    instance = model.__new__(model)
    fields = instance.__dict__
    state = fields["_state"] = ModelState()
    fields.update(zip(init_list, values, strict=True))
    state.adding = False
    state.db = db
    return instance


def _from_db(model: type[M], db: str, init_list: list[str], values: list[Any]) -> M:
    """`model.from_db` of values named in any order (from_db reads them in the fields' order)."""
    names = [field.attname for field in model._meta.concrete_fields if field.attname in init_list]
    if names != init_list:
        by_name = dict(zip(init_list, values, strict=True))
        values = [by_name[name] for name in names]
    return model.from_db(db, names, values)  # type: ignore[return-value]


def models_loaded(model: type[M], db: str, init_list: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[M]:
    """The instances of rows of a hand-written read, as `model.from_db` makes them (each row's values
    already through their fields' converters, named by `init_list`: concrete fields' attribute names,
    the others deferred), put in place when `_in_place_possible` (issue 26: a 50-turn path read's
    entries, ~1.1 of its ~2.2 ms of CPU in Model.__init__)."""
    names = list(init_list)
    if not _in_place_possible(model, tuple(names)):
        return [_from_db(model, db, names, list(row)) for row in rows]
    return [_in_place(model, db, names, list(row)) for row in rows]


class ReturnedRows(Generic[M]):
    """Rows of a model that a hand-written statement returns (`RETURNING` every concrete column,
    `columns(alias)`), built as the ORM builds the rows of a query (its converters, `from_db`):
    for a statement that writes a row and hands it back in the same round trip (the single append's
    thread, memoryapp.threads.services). What to build is worked out once per process."""

    def __init__(self, model: type[M]) -> None:
        self._model = model
        self._compiled: _Returned | None = None
        self._lock = threading.Lock()

    def _compile(self) -> _Returned:
        with self._lock:
            if self._compiled is None:
                queryset = self._model._default_manager.all()
                compiler = queryset.query.get_compiler(using=queryset.db)
                compiler.as_sql()
                select = [column[0] for column in compiler.select]
                init_list = [column.target.attname for column in select]
                self._compiled = _Returned(
                    db=queryset.db,
                    columns=tuple(str(column.target.column) for column in select),
                    init_list=init_list,
                    converters=sorted(compiler.get_converters(select).items()),
                    in_place=_in_place_possible(self._model, tuple(init_list)),
                )
            return self._compiled

    def columns(self, alias: str) -> str:
        """Every concrete column of the model, of the table named `alias`, in the order `build` takes."""
        compiled = self._compiled or self._compile()
        return ", ".join(f'{alias}."{column}"' for column in compiled.columns)

    def build(self, values: Sequence[Any]) -> M:
        """The model instance of one returned row's first values (those of `columns`, in order)."""
        compiled = self._compiled or self._compile()
        connection = connections[compiled.db]
        found = list(values[: len(compiled.columns)])
        for at, (functions, expression) in compiled.converters:
            value = found[at]
            for function in functions:
                value = function(value, expression, connection)
            found[at] = value
        if compiled.in_place:
            return _in_place(self._model, compiled.db, compiled.init_list, found)
        return self._model.from_db(compiled.db, compiled.init_list, found)

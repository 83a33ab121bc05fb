"""The ``pyspark.sql.functions`` the Catalyst mapping uses, building Spark SQL text.

Composing the mapping out of pyspark ``Column`` objects costs a py4j round trip for every
literal, operator, field access and lambda variable: tens of thousands per plan, most of
the time a plan takes to build. The functions here take and give :class:`Expr`, the same
expression as Spark SQL text, built in Python alone; :func:`select` turns a stage's
columns into one ``selectExpr``. Spark's parser makes of the text the unresolved
expressions the Column API would have made (the same functions, operators, casts, literal
types and lambdas), so the plan and its results are the same.

The argument rules are pyspark's: a ``str`` where pyspark takes a column or its name is a
column's name, where it takes a value (``when``, ``isin``, a pattern, a delimiter...) a
string literal; ``int``, ``float``, ``bool``, ``None`` and ``bytes`` are literals.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark.exceptions import MappingArgumentError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Expr", "check_session", "col", "expr", "lit", "select", "when", "with_column"]

_LAMBDA_IDS = itertools.count()
# Precedence, as Spark's grammar binds (higher binds tighter). An operand is put in
# parentheses only when it binds looser than its place needs: a parenthesis makes the
# parser look ahead to its end (a lambda's or a row's parameters also start with one),
# and around every operator that costs it memory and time past a few thousand levels.
_OR, _AND, _NOT, _PRED, _CMP, _UNARY, _PRIMARY = 10, 20, 30, 35, 40, 90, 100
_PRED_ARG = _CMP + 1
"""What IN, RLIKE and IS NULL take: a value, not a comparison."""
_LEVELS = {"OR": _OR, "AND": _AND, "=": _CMP, "!=": _CMP, "<": _CMP, "<=": _CMP, ">": _CMP,
           ">=": _CMP, "|": 50, "^": 55, "&": 60, "+": 70, "-": 70, "*": 80, "/": 80, "%": 80}


class Expr:
    """A column expression as Spark SQL text (``sql``), with the Column API's operators.

    ``name``: the alias (for a ``select`` or a ``struct`` field), None when it has none.
    """

    __slots__ = ("name", "prec", "sql")
    __hash__ = None  # type: ignore[assignment]  # == builds an expression, as Column's

    def __init__(self, sql: str, name: str | None = None, prec: int = _PRIMARY) -> None:
        self.sql = sql
        self.name = name
        self.prec = prec

    def __repr__(self) -> str:
        return f"Expr({self.sql!r}{'' if self.name is None else ' AS ' + self.name})"

    def __bool__(self) -> bool:
        raise MappingArgumentError("an expression has no truth value: use &, | and ~",
                                   field="expression", value=self.sql)

    # -- operators ----------------------------------------------------------------------
    def _bin(self, op: str, other: Any) -> Expr:
        return _binary(self, op, other)

    def _rbin(self, op: str, other: Any) -> Expr:
        return _binary(lit(other), op, self)

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._bin("=", other)

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._bin("!=", other)

    def __lt__(self, other: Any) -> Expr:
        return self._bin("<", other)

    def __le__(self, other: Any) -> Expr:
        return self._bin("<=", other)

    def __gt__(self, other: Any) -> Expr:
        return self._bin(">", other)

    def __ge__(self, other: Any) -> Expr:
        return self._bin(">=", other)

    def __and__(self, other: Any) -> Expr:
        return self._bin("AND", other)

    def __or__(self, other: Any) -> Expr:
        return self._bin("OR", other)

    def __rand__(self, other: Any) -> Expr:
        return self._rbin("AND", other)

    def __ror__(self, other: Any) -> Expr:
        return self._rbin("OR", other)

    def __invert__(self) -> Expr:
        return Expr(f"NOT {_operand(self, _NOT)}", prec=_NOT)

    def __neg__(self) -> Expr:
        return Expr(f"- {_operand(self, _UNARY)}", prec=_UNARY)

    def __add__(self, other: Any) -> Expr:
        return self._bin("+", other)

    def __radd__(self, other: Any) -> Expr:
        return self._rbin("+", other)

    def __sub__(self, other: Any) -> Expr:
        return self._bin("-", other)

    def __rsub__(self, other: Any) -> Expr:
        return self._rbin("-", other)

    def __mul__(self, other: Any) -> Expr:
        return self._bin("*", other)

    def __rmul__(self, other: Any) -> Expr:
        return self._rbin("*", other)

    def __truediv__(self, other: Any) -> Expr:
        return self._bin("/", other)

    def __rtruediv__(self, other: Any) -> Expr:
        return self._rbin("/", other)

    def __mod__(self, other: Any) -> Expr:
        return self._bin("%", other)

    def __getitem__(self, key: Any) -> Expr:
        return Expr(f"{_operand(self, _PRIMARY)}[{_operand(lit(key), _PRIMARY)}]")

    def bitwiseOR(self, other: Any) -> Expr:  # noqa: N802 - pyspark's name
        """``self | other``."""
        return self._bin("|", other)

    def bitwiseAND(self, other: Any) -> Expr:  # noqa: N802 - pyspark's name
        """``self & other``."""
        return self._bin("&", other)

    def bitwiseXOR(self, other: Any) -> Expr:  # noqa: N802 - pyspark's name
        """``self ^ other``."""
        return self._bin("^", other)

    # -- methods ------------------------------------------------------------------------
    def alias(self, name: str) -> Expr:
        """The same expression, named ``name``."""
        return Expr(self.sql, name, self.prec)

    def cast(self, type_: str) -> Expr:
        """``CAST(self AS type_)``."""
        return Expr(f"CAST({self.sql} AS {_type(type_)})")

    def try_cast(self, type_: str) -> Expr:
        """``TRY_CAST(self AS type_)``."""
        return Expr(f"TRY_CAST({self.sql} AS {_type(type_)})")

    def isNull(self) -> Expr:  # noqa: N802 - pyspark's name
        """``self IS NULL``."""
        return Expr(f"{_operand(self, _PRED_ARG)} IS NULL", prec=_PRED)

    def isNotNull(self) -> Expr:  # noqa: N802 - pyspark's name
        """``self IS NOT NULL``."""
        return Expr(f"{_operand(self, _PRED_ARG)} IS NOT NULL", prec=_PRED)

    def isin(self, *values: Any) -> Expr:
        """``self IN (values)``."""
        if len(values) == 1 and isinstance(values[0], list | set | tuple):
            values = tuple(values[0])
        if not values:
            raise MappingArgumentError("isin needs at least one value", field="isin",
                                       value=self.sql)
        return Expr(f"{_operand(self, _PRED_ARG)} IN ({', '.join(_lit_arg(v) for v in values)})",
                    prec=_PRED)

    def rlike(self, pattern: Any) -> Expr:
        """``self RLIKE pattern`` (a Java regular expression, found anywhere)."""
        return Expr(f"{_operand(self, _PRED_ARG)} RLIKE {_operand(lit(pattern), _PRIMARY)}",
                    prec=_PRED)

    def startswith(self, other: Any) -> Expr:
        """``startswith(self, other)``."""
        return Expr(f"startswith({self.sql}, {_lit_arg(other)})")

    def contains(self, other: Any) -> Expr:
        """``contains(self, other)``."""
        return Expr(f"contains({self.sql}, {_lit_arg(other)})")

    def when(self, cond: Any, value: Any) -> Expr:
        """Refused: ``when`` follows ``when``."""
        raise MappingArgumentError("when() follows when(), not another expression",
                                   field="when", value=self.sql)

    def otherwise(self, value: Any) -> Expr:
        """Refused: ``otherwise`` follows ``when``."""
        raise MappingArgumentError("otherwise() follows when(), not another expression",
                                   field="otherwise", value=self.sql)


class _Case(Expr):
    """``CASE WHEN ... END`` being built.

    :meth:`when` adds a branch, :meth:`otherwise` ends it.
    """

    __slots__ = ("branches",)

    def __init__(self, branches: tuple[tuple[str, str], ...]) -> None:
        arms = " ".join(f"WHEN {c} THEN {v}" for c, v in branches)
        super().__init__(f"CASE {arms} END")
        self.branches = branches

    def when(self, cond: Any, value: Any) -> Expr:
        """One more branch."""
        return _Case((*self.branches, (_col_arg(cond), _lit_arg(value))))

    def otherwise(self, value: Any) -> Expr:
        """The value when no branch holds."""
        arms = " ".join(f"WHEN {c} THEN {v}" for c, v in self.branches)
        return Expr(f"CASE {arms} ELSE {_lit_arg(value)} END")


# -- literals and arguments -------------------------------------------------------------
def _operand(x: Expr, need: int) -> str:
    """``x`` where its place needs precedence ``need``: bare, or in parentheses."""
    return x.sql if x.prec >= need else f"({x.sql})"


def _binary(left: Expr, op: str, right: Any) -> Expr:
    """``left op right``, left-associative as Spark parses it."""
    level = _LEVELS[op]
    return Expr(f"{_operand(left, level)} {op} {_operand(lit(right), level + 1)}", prec=level)


def _str_lit(s: str) -> str:
    # ``$`` as ``\u0024``: Spark substitutes ``${name}`` in the text before parsing it.
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("$", "\\u0024") + "'"


def _float_lit(x: float) -> str:
    if math.isnan(x):
        return "CAST('NaN' AS DOUBLE)"
    if math.isinf(x):
        return f"CAST('{'-' if x < 0 else ''}Infinity' AS DOUBLE)"
    return f"({x!r}D)" if math.copysign(1.0, x) < 0 else f"{x!r}D"


def _literal(v: Any) -> str:
    """SQL text of a Python value, of the type ``pyspark.sql.functions.lit`` gives it."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if not -(1 << 63) <= v < 1 << 63:
            raise MappingArgumentError(f"{v} does not fit a bigint", field="literal", value=v)
        return f"({v})" if v < 0 else str(v)
    if isinstance(v, float):
        return _float_lit(v)
    if isinstance(v, str):
        return _str_lit(v)
    if isinstance(v, bytes | bytearray):
        return f"X'{bytes(v).hex()}'"
    raise MappingArgumentError(f"no SQL literal for {type(v).__name__} {v!r}",
                               field="literal", value=repr(v))


def _col_arg(x: Any) -> str:
    """A ColumnOrName argument: an expression, a column's name, or a literal value."""
    if isinstance(x, Expr):
        return x.sql
    if isinstance(x, str):
        return _name(x)
    return _literal(x)


def _lit_arg(x: Any) -> str:
    """A value argument: an expression or a literal (a ``str`` is a string)."""
    return x.sql if isinstance(x, Expr) else _literal(x)


def _name(name: str) -> str:
    """A column reference: ``a.b`` is field ``b`` of column ``a``, as in ``col``."""
    if name == "*":
        return name
    return ".".join(f"`{part}`" for part in name.split("."))


def _type(type_: str) -> str:
    return type_


def _field(x: Any) -> str:
    """An argument of ``struct`` (or a ``select``): with ``AS`` its alias."""
    if isinstance(x, Expr) and x.name is not None:
        return f"{x.sql} AS `{x.name}`"
    return _col_arg(x)


def _lambda(f: Callable[..., Any]) -> str:
    n = len(inspect.signature(f).parameters)
    names = [f"lv_{next(_LAMBDA_IDS)}" for _ in range(n)]
    body = f(*[Expr(v) for v in names])
    params = names[0] if n == 1 else f"({', '.join(names)})"
    return f"{params} -> {_col_arg(body)}"


def _fn(name: str, spec: str) -> Callable[..., Expr]:
    """Function ``name`` of pyspark's: ``spec`` says each argument's kind.

    ``c`` a column or name, ``l`` a value, ``f`` a lambda; after a last ``*``, the
    kind before it repeats for the rest.
    """
    kinds = {"c": _col_arg, "l": _lit_arg, "f": _lambda}
    fixed = spec.rstrip("*")
    rest = fixed[-1] if spec.endswith("*") else None

    def call(*args: Any) -> Expr:
        if rest is None and len(args) > len(fixed):
            raise MappingArgumentError(f"{name} takes {len(fixed)} arguments",
                                       field=name, value=len(args))
        parts = [kinds[fixed[i] if i < len(fixed) else str(rest)](a)
                 for i, a in enumerate(args)]
        return Expr(f"{_SQL_NAMES.get(name, name)}({', '.join(parts)})")

    call.__name__ = name
    return call


def col(name: str) -> Expr:
    """Column ``name`` (``a.b``: field ``b`` of column ``a``)."""
    return Expr(_name(name))


def lit(v: Any) -> Expr:
    """A literal, typed as ``pyspark.sql.functions.lit`` types it."""
    return v if isinstance(v, Expr) else Expr(_literal(v))


def expr(text: str) -> Expr:
    """SQL text as it is."""
    return Expr(f"({text})")


def when(cond: Any, value: Any) -> Expr:
    """``CASE WHEN cond THEN value``; more with ``.when``, the rest with ``.otherwise``."""
    return _Case(((_col_arg(cond), _lit_arg(value)),))


def struct(*cols: Any) -> Expr:
    """A struct of the columns, each named by its alias (or its column's name)."""
    return Expr(f"struct({', '.join(_field(c) for c in cols)})")


def call_function(name: str, *cols: Any) -> Expr:
    """Function ``name`` (a registered one too) of the columns."""
    return Expr(f"{name}({', '.join(_col_arg(c) for c in cols)})")


_SQL_NAMES = {"create_map": "map"}
"""pyspark's name -> Spark SQL's, where they differ."""
_SPECS = {
    # every argument a column (or name; numbers are literals)
    "c*": ("abs ascii array array_distinct array_except array_intersect array_sort coalesce "
           "concat crc32 create_map flatten floor get greatest hex inline is_valid_utf8 isnan "
           "json_array_length least length log2 lower ltrim map_entries map_from_arrays "
           "map_from_entries map_keys map_values octet_length pmod pow repeat replace "
           "regexp_extract_all schema_of_variant sequence size slice substring to_json "
           "try_element_at try_parse_json unhex unix_millis shiftleft shiftright "
           "shiftrightunsigned"),
    "cll": "regexp_replace lpad try_variant_get regexp_extract",
    "cl*": "array_join encode decode instr array_contains array_position from_json",
    "l*": "concat_ws format_string",
    "cf": "filter exists transform map_filter",
    "ccf": "aggregate zip_with",
}


for _spec, _names in _SPECS.items():
    for _n in _names.split():
        globals()[_n] = _fn(_n, _spec)


def to_avro(data: Any, schema: str) -> Expr:
    """``to_avro`` of ``pyspark.sql.avro.functions``."""
    return Expr(f"to_avro({_col_arg(data)}, {_literal(schema)})")


def from_avro(data: Any, schema: str, options: dict[str, str] | None = None) -> Expr:
    """``from_avro`` of ``pyspark.sql.avro.functions``."""
    opts = "" if not options else ", map(" + ", ".join(
        f"{_literal(k)}, {_literal(v)}" for k, v in options.items()) + ")"
    return Expr(f"from_avro({_col_arg(data)}, {_literal(schema)}{opts})")


# -- DataFrames -------------------------------------------------------------------------
def check_session(spark: SparkSession) -> None:
    """Refuse a session whose parser would read the string literals otherwise.

    Raises:
        MappingArgumentError: ``spark.sql.parser.escapedStringLiterals`` is on (the
            literals here are written with backslash escapes).
    """
    key = "spark.sql.parser.escapedStringLiterals"
    value = spark.conf.get(key, "false")
    if str(value).strip().lower() == "true":
        raise MappingArgumentError(f"the mapping needs {key}=false, got {value!r}",
                                   field=key, value=value)


def select(df: DataFrame, *cols: Any) -> DataFrame:
    """``df.select(*cols)`` in one ``selectExpr`` (pyspark Columns: a ``select``)."""
    if any(not isinstance(c, Expr | str) for c in cols):
        from pyspark.sql import functions

        return df.select(*[_column(functions, c) for c in cols])
    return df.selectExpr(*[_field(c) for c in cols])


def _column(functions: Any, c: Any) -> Any:
    if not isinstance(c, Expr):
        return c
    out = functions.expr(c.sql)
    return out if c.name is None else out.alias(c.name)


def with_column(df: DataFrame, name: str, c: Any) -> DataFrame:
    """``df.withColumn(name, c)``: replaced in place, or added at the end."""
    if not isinstance(c, Expr):
        return df.withColumn(name, c)
    cols = df.columns
    if name not in cols:
        return select(df, "*", c.alias(name))
    return select(df, *[c.alias(name) if n == name else col(n) for n in cols])

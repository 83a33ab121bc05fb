"""One predicate against its attribute: which operators apply, its refusal, a prefix's end.

The rules of ``dls.predicates`` (``docs/architecture.md``, the Spark mapping): an operator
must apply to the attribute's type (:func:`allowed_ops`); a numeric attribute takes finite
numbers (``low``/``high`` of a ``between`` in order), the others strings, a discrete one
only its own values. A refusal names the attribute and the value at fault, in the same
words as the Python core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark.catalyst.columns import error, first_error, fns, is_optional, kind_of, quoted

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["KEYWORDS", "allowed_ops", "fmt_value", "op_error", "pred_text", "prefix_end",
           "py_float", "py_repr", "py_str", "value_error", "with_texts"]

KEYWORDS = ("and", "or", "between", "in", "not", "prefix", "exists", "missing")
"""Reserved words of the text form (a value spelled like one must be quoted)."""

_TAKES = {
    "numeric": ("=", "!=", "<", "<=", ">", ">=", "between", "in", "not in"),
    "discrete": ("=", "!=", "in", "not in"),
    "string": ("=", "!=", "<", "<=", ">", ">=", "between", "in", "not in", "prefix"),
    "hashed": ("=", "!=", "in", "not in"),
}


def allowed_ops(a: Any) -> tuple[str, ...]:
    """The operators attribute ``a`` takes (``exists``/``missing`` when it is optional)."""
    ops = _TAKES[kind_of(a)]
    return (*ops, "exists", "missing") if is_optional(a) else ops


def py_float(x: Column) -> Column:
    """``repr(x)`` of a double, as Python writes it (``1e-05``, ``45.0``, ``1.5e+16``).

    From Spark's text of the double (Java's digits, the shortest but for some subnormals on
    JDK 17), re-placed by Python's rules: positional for decimal exponents from -4
    to 15, else ``d.ddde±XX``.
    """
    F = fns()
    j = F.regexp_replace(x.cast("string"), "^-", "")
    ip = F.regexp_extract(j, r"^(\d+)", 1)
    fp = F.regexp_extract(j, r"^\d+\.(\d+)", 1)
    ex = F.coalesce(F.regexp_extract(j, r"E(-?\d+)$", 1).try_cast("int"), F.lit(0))
    d0 = F.concat(ip, fp)
    d1 = F.regexp_replace(d0, "^0+", "")
    point = F.length(ip) + ex - (F.length(d0) - F.length(d1))
    d = F.regexp_replace(d1, "0+$", "")
    n = F.length(d)
    e = point - 1
    positional = (F.when(point <= 0, F.concat(F.lit("0."), F.repeat(F.lit("0"), -point), d))
                  .when(point >= n, F.concat(d, F.repeat(F.lit("0"), point - n), F.lit(".0")))
                  .otherwise(F.concat(F.substring(d, F.lit(1), point), F.lit("."),
                                      F.substring(d, point + 1, F.lit(400)))))
    sci = F.concat(F.substring(d, 1, 1),
                   F.when(n > 1, F.concat(F.lit("."), F.substring(d, F.lit(2), F.lit(400))))
                   .otherwise(F.lit("")),
                   F.lit("e"), F.when(e < 0, F.lit("-")).otherwise(F.lit("+")),
                   F.when(F.abs(e) < 10, F.lit("0")).otherwise(F.lit("")),
                   F.abs(e).cast("string"))
    body = (F.when(n == 0, F.lit("0.0"))
            .when((e >= -4) & (e < 16), positional).otherwise(sci))
    # JDK 17 writes the least subnormal as 4.9E-324, one digit more than it needs.
    return (F.when(F.isnan(x), F.lit("nan"))
            .when(F.abs(x) == 5e-324, F.when(x < 0, F.lit("-5e-324")).otherwise(F.lit("5e-324")))
            .when(x == float("inf"), F.lit("inf")).when(x == float("-inf"), F.lit("-inf"))
            .otherwise(F.concat(F.when(x.cast("string").startswith("-"), F.lit("-"))
                                .otherwise(F.lit("")), body)))


def _is_int(v: Column) -> Column:
    """The value is a Python int: a JSON integer, or a text token of digits."""
    return (v["k"] == "num") & v["s"].rlike(r"^[-+]?\d+$")


def _int_text(v: Column) -> Column:
    return v["s"].cast("decimal(38,0)").cast("string")


def py_str(s: Column) -> Column:
    """``repr`` of a string: in single quotes, or double when it holds only a single one."""
    F = fns()
    back = F.replace(s, F.lit("\\"), F.lit("\\\\"))
    return (F.when((F.instr(s, "'") > 0) & (F.instr(s, '"') == 0),
                   F.concat(F.lit('"'), back, F.lit('"')))
            .otherwise(F.concat(F.lit("'"), F.replace(back, F.lit("'"), F.lit("\\'")),
                                F.lit("'"))))


def with_texts(v: Column) -> Column:
    """A value ``struct<k, n, s>`` with ``r`` and ``f`` added (``VAL_TYPE``).

    ``r``: its Python ``repr``; ``f``: its text-form spelling. Each is built once here
    (bound to a lambda variable), so that the refusals that show a value read a field
    instead of carrying the whole formatting.
    """
    F = fns()

    def add_repr(x: Column) -> Column:
        return F.struct(x["k"].alias("k"), x["n"].alias("n"), x["s"].alias("s"),
                        _repr_text(x).alias("r"))

    def add_fmt(x: Column) -> Column:
        return F.struct(x["k"].alias("k"), x["n"].alias("n"), x["s"].alias("s"),
                        x["r"].alias("r"), _fmt_text(x).alias("f"))

    return F.get(F.transform(F.transform(F.array(v), add_repr), add_fmt), 0)


def _repr_text(v: Column) -> Column:
    F = fns()
    s = v["s"]
    return (F.when(v["k"] == "str", py_str(s))
            .when(_is_int(v), _int_text(v))
            .when(v["k"] == "num", py_float(v["n"]))
            .when(v["k"] == "inf", F.lit("inf")).when(v["k"] == "nan", F.lit("nan"))
            .when(s == "true", F.lit("True")).when(s == "false", F.lit("False"))
            .when(s == "null", F.lit("None")).otherwise(s))


def _fmt_text(v: Column) -> Column:
    F = fns()
    s = v["s"]
    # A word bare, unless the text form would read it as a keyword or a float.
    bare = (s.rlike(r"\A[A-Za-z_][A-Za-z0-9_.\-]*\z")
            & ~F.lower(s).isin(*KEYWORDS, "nan", "inf", "infinity"))
    quoted_s = F.concat(F.lit('"'), F.replace(F.replace(s, F.lit("\\"), F.lit("\\\\")),
                                              F.lit('"'), F.lit('\\"')), F.lit('"'))
    whole = (v["k"] == "num") & (F.floor(v["n"]) == v["n"]) & (F.abs(v["n"]) < 1e15)
    return (F.when(v["k"] == "str", F.when(bare, s).otherwise(quoted_s))
            .when(_is_int(v), _int_text(v))
            .when(whole, v["n"].cast("bigint").cast("string"))
            .otherwise(v["r"]))


def py_repr(v: Column) -> Column:
    """A predicate value as Python's ``repr`` shows it.

    A string in Python's quotes, an int's digits, a float's repr, JSON's true/false/null
    as Python's.
    """
    return v["r"]


def fmt_value(v: Column) -> Column:
    """A value as the text form writes it (``dls.where._fmt``).

    A word bare, any other string in double quotes (a keyword or nan/inf too), a whole
    float below 1e15 as an int, else its repr.
    """
    return v["f"]


def pred_text(p: Column) -> Column:
    """A predicate in the text form (``dls.where.Predicate.to_text``)."""
    F = fns()
    op, vals = p["op"], p["vals"]
    head = F.concat(p["attr"], F.lit(" "), op)
    return (F.when(op == "between", F.concat(p["attr"], F.lit(" between "),
                                             F.get(vals, 0)["f"], F.lit(" and "),
                                             F.get(vals, 1)["f"]))
            .when(op.isin("in", "not in"),
                  F.concat(head, F.lit(" ("), F.array_join(vals["f"], ", "), F.lit(")")))
            .when(op.isin("exists", "missing"), head)
            .otherwise(F.concat(head, F.lit(" "), F.get(vals, 0)["f"])))


def prefix_end(p: Column) -> Column:
    """``p+``: every string with prefix ``p`` is in ``[p, p+)``, and no other.

    ``p`` without its trailing U+10FFFF, its last character one code point up (null,
    unbounded, when nothing is left).
    """
    F = fns()
    q = F.regexp_replace(p, "\\x{10FFFF}+$", "")
    up = F.ascii(F.substring(q, -1, 1)).cast("bigint") + 1
    # U+D800..U+DFFF (surrogates) hold no character of valid UTF-8: from U+D7FF, the next
    # one Spark can write is U+E000, the same bound for every valid string.
    cp = F.when(up == 0xD800, F.lit(0xE000).cast("bigint")).otherwise(up)

    def byte(x: Column) -> Column:
        return F.lpad(F.hex(x), 2, "0")

    def cont(shift: int) -> Column:
        return byte(F.shiftright(cp, shift).bitwiseAND(0x3F).bitwiseOR(0x80))

    utf8 = (F.when(cp < 0x80, byte(cp))
            .when(cp < 0x800, F.concat(byte(F.shiftright(cp, 6).bitwiseOR(0xC0)), cont(0)))
            .when(cp < 0x10000, F.concat(byte(F.shiftright(cp, 12).bitwiseOR(0xE0)), cont(6),
                                         cont(0)))
            .otherwise(F.concat(byte(F.shiftright(cp, 18).bitwiseOR(0xF0)), cont(12), cont(6),
                                cont(0))))
    last = F.decode(F.unhex(utf8), "UTF-8")
    return F.when(F.length(q) > 0, F.concat(F.substring(q, F.lit(1), F.length(q) - 1), last))


def op_error(a: Any, p: Column) -> Column:
    """The refusal of predicate ``p``'s operator on attribute ``a`` (null when it applies)."""
    F = fns()
    ops = allowed_ops(a)
    op = p["op"]
    return F.when(~op.isin(*ops), error(
        F.concat(F.lit(f"attribute {a.name!r} is {kind_of(a)}: "), quoted(op),
                 F.lit(f" does not apply (it takes {', '.join(ops)})")), a.name, op))


def value_error(a: Any, p: Column) -> Column:
    """The refusal of predicate ``p``'s values on attribute ``a`` (null when they are fine).

    A value of the wrong type (a numeric attribute's NaN or infinity too), an unknown
    discrete value, or an inverted ``between``.
    """
    F = fns()
    name = repr(a.name)
    kind = kind_of(a)
    op = p["op"]
    vals = p["vals"]
    v0, v1 = F.get(vals, 0), F.get(vals, 1)
    if kind == "numeric":
        def one(v: Column, i: Column) -> Column:
            what = F.when(op == "between", F.when(i == 0, "low").otherwise("high"))\
                .otherwise("value")
            shown = py_repr(v)
            return first_error(
                (v["k"].isin("str", "other", "kw"),
                 error(F.concat(F.lit(f"attribute {name}: "), what,
                                F.lit(" must be a number, got "), shown), a.name, shown)),
                ((v["k"] == "nan") | F.isnan(v["n"]),
                 error(F.concat(F.lit(f"attribute {name}: "), what, F.lit(" is NaN")),
                       a.name, shown)),
                ((v["k"] == "inf") | v["n"].isin(float("inf"), float("-inf")),
                 error(F.concat(F.lit(f"attribute {name}: "), what,
                                F.lit(" must be finite, got "),
                                F.when(v["n"] < 0, F.lit("-inf")).otherwise(F.lit("inf"))),
                       a.name, shown)),
            )
        inverted = (op == "between") & F.coalesce(v0["n"] > v1["n"], F.lit(False))
        shown = (py_repr(v0), py_repr(v1))
    else:
        def one(v: Column, i: Column) -> Column:
            del i
            shown = py_repr(v)
            checks = [(v["k"] != "str",
                       error(F.concat(F.lit(f"attribute {name} is {kind}: values must be "
                                            "strings, got "), shown), a.name, shown))]
            if kind == "discrete":
                checks.append((~v["s"].isin(*a.values),
                               error(F.concat(F.lit(f"attribute {name}: unknown value "),
                                              shown), a.name, v["s"])))
            return first_error(*checks)
        inverted = (op == "between") & F.coalesce(v0["s"] > v1["s"], F.lit(False))
        shown = (py_repr(v0), py_repr(v1))
    bad = F.try_element_at(F.filter(F.transform(vals, one), lambda e: e.isNotNull()),
                           F.lit(1))
    return F.coalesce(bad, F.when(inverted, error(
        F.concat(F.lit(f"attribute {name}: inverted range, low "), shown[0],
                 F.lit(" > high "), shown[1]), a.name, None)))

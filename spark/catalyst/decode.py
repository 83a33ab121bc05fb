"""Raw records (Avro single-object or JSON) of one kind -> typed columns and ``_err``.

The rules are those of :func:`connectors.serde.decode_raw`: the same fields, the same
``op``, the same refusals with the same reasons (field and value named). JSON is read twice:
as a variant (``try_parse_json``, which keeps ``1`` apart from ``1.0``) and typed
(``from_json``, which keeps the order of the keys); Avro with ``from_avro``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from connectors.serde import RAW_FIELDS, RAW_OPS, RAW_SCHEMAS
from connectors.serde.framing import HEADER_SIZE
from connectors.topics import NAME_PATTERN
from spark.catalyst.columns import (
    ERR_TYPE,
    error,
    first_error,
    fns,
    header_bytes,
    is_num_type,
    json_rules,
    quoted,
    replace_err,
    schema_json,
    str_array,
    variant_type,
)
from spark.catalyst.sink import with_source
from spark.catalyst.sqlfns import check_session, select

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["decode"]

# Python's fullmatch in Java's find() (rlike): \z is the end of the input, where $ would
# also match before a final line break.
_NAME_RE = r"\A" + NAME_PATTERN + r"\z"
_TYPED = {
    "event": {"node": "string", "client": "string", "id": "string",
              "attrs": "map<string,string>", "payload": "string"},
    "subscription": {"node": "string", "client": "string", "id": "string", "where": "string"},
    "unsubscription": {"node": "string", "client": "string", "id": "string"},
}
"""Fields of the typed reading of a raw JSON record (a non-string value comes as its text)."""
_KEEP = ("_value", "_headers", "_source", "_published", "_avro", "_err", "node", "client",
         "id", "attrs", "payload", "wtext", "wjson", "where")


def decode(raw: DataFrame, kind: str, n_attrs: int = 0) -> DataFrame:
    """Raw records of one kind -> common columns, kind-specific ones and ``_err``.

    Common: ``_value``, ``_headers``, ``_source``, ``_published``, ``_avro`` (bool),
    ``node``, ``client``, ``id``. Event: ``attrs`` (map of Avro union structs, keys in the
    record's order), ``payload``. Subscription: ``wtext`` (text form), ``wjson`` (variant
    array) and ``where`` (as written). Each stage is its own ``select`` so that no
    expression is copied into another. ``n_attrs``: the attributes of the space (an
    event's members up to that many keys are built without a lambda).
    """
    F = fns()
    json_rules(raw.sparkSession)
    check_session(raw.sparkSession)
    what = f"raw {kind}"
    df = _read(raw, kind)
    df = select(df, "*", *_fields(kind, what))
    if kind == "event":
        n_attrs = max(n_attrs, 1)
        df = _event_columns(_event_members(df, n_attrs), n_attrs)
    elif kind == "subscription":
        df = _subscription_columns(df)
    else:
        df = select(df, "*", F.lit(None).cast(ERR_TYPE).alias("_kerr"))
    df = replace_err(df, F.col("_kerr"), _names_err(what))
    return select(df, *[c for c in df.columns if c in _KEEP])


def _read(raw: DataFrame, kind: str) -> DataFrame:
    """The source columns and the two readings of the value, Avro and JSON.

    Adds ``_avro``, ``_hdr_ok``, ``_rec`` (the Avro record), ``_text``, ``_v`` (variant),
    ``_j`` (typed JSON) and ``_top`` (the JSON object's fields).
    """
    F = fns()
    schema_name = RAW_SCHEMAS[kind]
    df = with_source(raw)
    value = F.col("_value")
    is_avro = F.coalesce(F.substring(value, 1, 2) == F.lit(bytearray(b"\xc3\x01")),
                         F.lit(False))
    header_ok = F.coalesce(F.substring(value, 1, 10) == header_bytes(schema_name),
                           F.lit(False))
    rec = F.from_avro(F.expr("substring(_value, 11)"), schema_json(schema_name),
                    {"mode": "PERMISSIVE"})
    as_text = value.cast("string")
    text = F.when(as_text.startswith("\ufeff"), F.expr("substring(cast(_value as string), 2)"))\
        .otherwise(as_text)
    df = select(df, "*", is_avro.alias("_avro"), header_ok.alias("_hdr_ok"))
    df = select(df, "*", F.when(F.col("_avro") & F.col("_hdr_ok"), rec).alias("_rec"),
                    F.when(~F.col("_avro"), text).alias("_text"))
    typed_schema = "struct<" + ",".join(f"{k}:{t}" for k, t in _TYPED[kind].items()) + ">"
    # A second, typed reading of the same text: the keys of ``attrs`` in their order and
    # the values' text, and the string fields without a variant cast each.
    df = select(df, "*", F.try_parse_json(F.col("_text")).alias("_v"),
                    F.from_json(F.col("_text"), typed_schema).alias("_j"))
    return select(df, "*", F.try_variant_get(F.col("_v"), "$", "map<string,variant>")
                      .alias("_top"))


def _jfield(name: str) -> Column:
    """Field ``name`` of the JSON object (a variant; null when absent)."""
    F = fns()
    return F.try_element_at(F.col("_top"), F.lit(name))


def _jtype(name: str) -> Column:
    return variant_type(_jfield(name))


def _jstr(kind: str, name: str) -> Column:
    """Field ``name`` of the JSON object when it is a string (else null)."""
    F = fns()
    typed = F.col("_j")[name] if name in _TYPED[kind] else F.lit(None).cast("string")
    return F.when(_jtype(name) == "STRING",
                  F.coalesce(typed, F.try_variant_get(_jfield(name), "$", "string")))


def _json_err(kind: str, what: str) -> Column:
    """The first refusal of a JSON record: not JSON, not one object, a bad op or field."""
    F = fns()
    value, top = F.col("_value"), F.col("_top")
    fields = RAW_FIELDS[kind]
    allowed = (*fields, "payload") if kind == "event" else fields
    # The first key not allowed / the first field absent, in order (array_except keeps the
    # order of its first argument): no lambda, which Spark would evaluate interpreted.
    unknown = F.try_element_at(
        F.array_except(F.map_keys(top), str_array((*allowed, "op"))), F.lit(1))
    missing = F.try_element_at(F.array_except(str_array(fields), F.map_keys(top)), F.lit(1))
    empty = F.coalesce(F.length(value) == 0, F.lit(True))
    op = _jfield("op")
    return first_error(
        (empty, error(f"{what}: empty message", "value", None)),
        (~F.is_valid_utf8(value.cast("string")),
         error(f"{what}: neither Avro single-object (no C3 01 marker) nor UTF-8 JSON", "value",
               F.hex(F.substring(value, 1, 64)))),
        (F.col("_v").isNull(),
         error(f"{what}: neither Avro single-object (no C3 01 marker) nor JSON", "value",
               F.substring(F.col("_text"), 1, 120))),
        # Spark's JSON readers stop after the first value; Python's json refuses text after
        # it. Wrapped in brackets, such a text is no longer one valid JSON array.
        (F.json_array_length(F.concat(F.lit("["), F.col("_text"), F.lit("]"))).isNull(),
         error(f"{what}: more text after the JSON value (not one JSON document)", "value",
               F.substring(F.col("_text"), 1, 120))),
        (top.isNull(),
         error(F.concat(F.lit(f"{what}: a JSON object is expected, got "),
                        F.lower(variant_type(F.col("_v")))), "value",
               F.substring(F.col("_text"), 1, 120))),
        (op.isNotNull() & ~F.coalesce(_jstr(kind, "op") == RAW_OPS[kind], F.lit(False)),
         error(F.concat(F.lit(f"{what}: op must be '{RAW_OPS[kind]}' (or absent), got "),
                        F.to_json(op)), "op", F.to_json(op))),
        (unknown.isNotNull(),
         error(F.concat(F.lit(f"{what}: unknown field "), quoted(unknown),
                        F.lit(f" (fields: {', '.join(allowed)})")), unknown,
               F.to_json(F.try_element_at(top, unknown)))),
        (missing.isNotNull(),
         error(F.concat(F.lit(f"{what}: missing field "), quoted(missing)), missing, None)),
    )


def _avro_err(kind: str, what: str) -> Column:
    """The first refusal of an Avro record: too short, another schema, a body that fails."""
    F = fns()
    value, rec = F.col("_value"), F.col("_rec")
    schema_name = RAW_SCHEMAS[kind]
    fp = F.lower(F.hex(F.substring(value, 3, 8)))
    unread = _unread(kind)
    return first_error(
        (F.length(value) < 10,
         error(F.concat(F.lit(f"{what}: "), F.length(value).cast("string"),
                        F.lit(" bytes are too short for Avro single-object")),
               "value", F.hex(value))),
        (~F.col("_hdr_ok"),
         error(F.concat(F.lit(f"{what}: an Avro message of another schema than {schema_name} "
                              "(fingerprint "), fp, F.lit(")")), "fingerprint", fp)),
        (rec.isNull() | rec["node"].isNull(),
         error(f"{what}: the {schema_name} body does not decode", "value",
               F.hex(F.substring(value, 1, 64)))),
        # from_avro does not check a string's UTF-8 (fastavro does): text joined by an
        # ASCII byte is valid UTF-8 exactly when every part is.
        (~F.is_valid_utf8(F.concat_ws("\n", *_avro_strings(kind))),
         error(f"{what}: the {schema_name} body does not decode (a string is not valid "
               "UTF-8)", "value", F.hex(F.substring(value, 1, 64)))),
        *([] if unread is None else [
            (unread > 0, error(F.concat(F.lit(f"{what}: the {schema_name} body is followed by "),
                                        unread.cast("string"), F.lit(" unread bytes")),
                               "value", F.hex(F.substring(value, 1, 64))))]),
    )


def _unread(kind: str) -> Column | None:
    """The bytes after the body of a record of strings only (from_avro ignores them).

    None for an event, whose size is no function of its fields alone (a map may come in
    blocks).
    """
    if kind == "event":
        return None
    F = fns()
    size: Column = F.lit(HEADER_SIZE)
    for name in RAW_FIELDS[kind]:  # each a string: its length (a varint), then its bytes
        n = F.octet_length(F.col("_rec")[name])
        size = size + n + F.when(n < 64, 1).when(n < 8192, 2).when(n < 1 << 20, 3)\
            .when(n < 1 << 27, 4).otherwise(5)
    return F.octet_length(F.col("_value")) - size


def _avro_strings(kind: str) -> list[Column]:
    """The string fields of the Avro record (arrays of strings for an event's attrs)."""
    rec = fns().col("_rec")
    cols = [rec["node"], rec["client"], rec["id"]]
    if kind == "event":
        cols += [fns().map_keys(rec["attrs"]), fns().map_values(rec["attrs"])["member2"]]
    elif kind == "subscription":
        cols.append(rec["where"])
    return cols


def _fields(kind: str, what: str) -> list[Column]:
    """``node``, ``client``, ``id`` and ``_err`` of either encoding, and the kind's fields.

    The kind's fields are those of the JSON reading: ``_am``, ``_tm``, ``_pt``, ``_ps``
    (event); ``_wt``, ``_ws``, ``_wj``, ``_wv`` (subscription).
    """
    F = fns()
    avro, rec = F.col("_avro"), F.col("_rec")
    cols = [F.when(avro, rec[n]).otherwise(_jstr(kind, n)).alias(n)
            for n in ("node", "client", "id")]
    cols.append(F.when(avro, _avro_err(kind, what)).otherwise(_json_err(kind, what))
                .alias("_err"))
    if kind == "event":
        cols += [F.try_variant_get(_jfield("attrs"), "$", "map<string,variant>").alias("_am"),
                 F.col("_j")["attrs"].alias("_tm"),
                 _jtype("payload").alias("_pt"),
                 _jstr(kind, "payload").alias("_ps")]
    elif kind == "subscription":
        cols += [_jtype("where").alias("_wt"), _jstr(kind, "where").alias("_ws"),
                 F.when(_jstr(kind, "where").isNull(), F.to_json(_jfield("where")))
                 .alias("_wj"),
                 _jfield("where").alias("_wv")]
    return cols


# -- events -----------------------------------------------------------------------------------
def _member(k: Column) -> Column:
    """The Avro union struct (with its variant type ``t``) of the JSON attribute ``k``."""
    F = fns()
    am, tm = F.col("_am"), F.col("_tm")
    # A repeated key: its last text (a lambda, so only then).
    dups = F.size(F.col("_keys")) != F.size(tm)
    vk = F.try_element_at(am, k)
    t = variant_type(vk)
    last_text = F.when(dups, F.try_element_at(
        F.map_values(F.map_filter(tm, lambda kk, _v: kk == k)), F.lit(-1))
    ).otherwise(F.try_element_at(tm, k))
    text_v = F.coalesce(last_text, vk.cast("string"))
    # The text of an integer or a string token is exactly its value; casting the
    # variant instead would build a Cast (and a SQLConf) per value.
    return F.struct(
        t.alias("t"),
        F.when(t == "BIGINT", F.coalesce(last_text.try_cast("bigint"),
                                         F.try_variant_get(vk, "$", "bigint")))
        .alias("member0"),
        F.when(is_num_type(t) & (t != "BIGINT"), text_v.try_cast("double"))
        .alias("member1"),
        F.when(t == "STRING", F.coalesce(last_text,
                                         F.try_variant_get(vk, "$", "string")))
        .alias("member2"))


def _strip(m: Column) -> Column:
    F = fns()
    return F.struct(m["member0"].alias("member0"), m["member1"].alias("member1"),
                    m["member2"].alias("member2"))


def _is_bad(m: Column) -> Column:
    return ~is_num_type(m["t"]) & (m["t"] != "STRING")


def _few(n_attrs: int) -> Column:
    """True when the event has at most ``n_attrs`` keys (its members are built unrolled)."""
    n_keys = fns().size(fns().col("_keys"))
    return (n_keys <= n_attrs) & (n_keys >= 0)


def _event_members(df: DataFrame, n_attrs: int) -> DataFrame:
    """Add ``_keys`` (the JSON attributes' keys in order) and ``_members`` (their values)."""
    F = fns()
    df = select(df, "*", F.coalesce(F.array_distinct(F.map_keys(F.col("_tm"))),
                                    F.map_keys(F.col("_am"))).alias("_keys"))
    # Up to n_attrs keys (every valid event: one per attribute of the space), the members
    # are built position by position in generated code; a lambda over an array of
    # structs runs interpreted, at a SQLConf per element read, so it is only the fallback
    # for more keys than that.
    keys = F.col("_keys")
    unrolled = [_member(F.get(keys, i)) for i in range(n_attrs)]
    return select(df, "*", F.when(_few(n_attrs), F.slice(F.array(*unrolled), 1, F.size(keys)))
                      .otherwise(F.transform(keys, _member)).alias("_members"))


def _event_columns(df: DataFrame, n_attrs: int) -> DataFrame:
    """Add ``attrs``, ``payload`` and ``_kerr`` of an event (from Avro or the members)."""
    F = fns()
    avro, rec, am = F.col("_avro"), F.col("_rec"), F.col("_am")
    keys, members = F.col("_keys"), F.col("_members")
    n_keys = F.size(keys)
    few = _few(n_attrs)
    any_bad = F.when(few, F.coalesce(*[
        F.when(F.get(members, i).isNotNull() & _is_bad(F.get(members, i)), F.lit(True))
        for i in range(n_attrs)], F.lit(False))).otherwise(F.exists(members, _is_bad))
    bad = F.when(any_bad, F.try_element_at(F.filter(members, _is_bad), F.lit(1)))
    bad_k = F.get(keys, F.array_position(members, bad) - 1)
    bad_j = F.to_json(F.try_element_at(am, bad_k))
    json_attrs = F.map_from_arrays(keys, F.when(few, F.slice(F.array(*[
        _strip(F.get(members, i)) for i in range(n_attrs)]), 1, n_keys))
        .otherwise(F.transform(members, _strip)))
    attrs_j, payload_j = F.to_json(_jfield("attrs")), F.to_json(_jfield("payload"))
    kind_err = first_error(
        (~avro & am.isNull(),
         error(F.concat(F.lit("raw event: attrs must be an object, got "), attrs_j), "attrs",
               attrs_j)),
        (~avro & bad.isNotNull(),
         error(F.concat(F.lit("raw event: attrs["), quoted(bad_k),
                        F.lit("] must be a number or a string, got "), bad_j),
               F.concat(F.lit("attrs."), bad_k), bad_j)),
        (~avro & F.col("_pt").isNotNull() & (F.col("_pt") != "STRING"),
         error(F.concat(F.lit("raw event: payload must be a string, got "), payload_j),
               "payload", payload_j)),
    )
    return select(df,
        "*",
        F.when(avro, rec["attrs"]).otherwise(json_attrs).alias("attrs"),
        F.when(avro, rec["payload"])
        .otherwise(F.coalesce(F.encode(F.col("_ps"), "UTF-8"), F.lit(bytearray())))
        .alias("payload"),
        kind_err.alias("_kerr"))


# -- subscriptions ----------------------------------------------------------------------------
def _subscription_columns(df: DataFrame) -> DataFrame:
    """Add ``wtext``, ``wjson``, ``where`` and ``_kerr`` of a subscription."""
    F = fns()
    avro, wt = F.col("_avro"), F.col("_wt")
    avro_where = F.col("_rec")["where"]
    first = F.substring(F.ltrim(avro_where), 1, 1)
    df = select(df, "*", F.coalesce(first.isin("[", "{"), F.lit(False)).alias("_aj"),
                    first.alias("_a1"), F.try_parse_json(avro_where).alias("_awv"))
    aj = F.col("_aj")
    # In Avro, a where that starts with '[' or '{' is JSON (a list, or {"any": ...}).
    want = F.when(F.col("_a1") == "[", F.lit("ARRAY")).otherwise(F.lit("OBJECT"))
    what = F.when(F.col("_a1") == "[", F.lit("list")).otherwise(F.lit("object"))
    kind_err = first_error(
        (~avro & (wt != "STRING") & ~wt.startswith("ARRAY") & ~wt.startswith("OBJECT"),
         error(F.concat(F.lit("raw subscription: where must be a string, a list of predicates "
                              "or an object {\"any\": [...]}, got "), F.col("_wj")), "where",
               F.col("_wj"))),
        (avro & aj & ~F.coalesce(variant_type(F.col("_awv")).startswith(want), F.lit(False)),
         error(F.concat(F.lit("raw subscription: where starts with '"), F.col("_a1"),
                        F.lit("' but is not a JSON "), what), "where", avro_where)),
    )
    return select(df,
        "*",
        F.when(avro, F.when(~aj, avro_where)).otherwise(F.col("_ws")).alias("wtext"),
        F.when(avro, F.when(aj, F.col("_awv")))
        .otherwise(F.when(wt.startswith("ARRAY") | wt.startswith("OBJECT"), F.col("_wv")))
        .alias("wjson"),
        F.when(avro, avro_where).otherwise(F.coalesce(F.col("_ws"), F.col("_wj")))
        .alias("where"),
        kind_err.alias("_kerr"))


def _names_err(what: str) -> Column:
    """The first refusal of ``node``, ``client`` (topic name parts) and ``id``."""
    F = fns()
    return first_error(
        *[(~F.coalesce(F.col(n).rlike(_NAME_RE), F.lit(False)),
           error(F.concat(F.lit(f"{what}: {n} must be a non-empty name of letters, digits, "
                                "'_' and '-' (it is part of a topic name), got "),
                          F.coalesce(quoted(F.col(n)), F.lit("None"))), n, F.col(n)))
          for n in ("node", "client")],
        (F.coalesce(F.length(F.col("id")) == 0, F.lit(True)),
         error(F.concat(F.lit(f"{what}: id must be a non-empty string, got "),
                        F.coalesce(quoted(F.col("id")), F.lit("None"))), "id", F.col("id"))),
    )

"""Checks a Delta table against an expectation file: exact Arrow types and
exact values, read back by two independent readers (Python `deltalake` and
polars).

usage: check_types.py TABLE_URI EXPECTED_JSON [--storage-option K=V ...]

EXPECTED_JSON (see tests/fixtures/debezium/make_fixtures.py):
  {"key": "id",
   "types": {"col": "<str(pyarrow type)>", ...},   source columns only
   "rows": [{"id": 1, "col": <value>, ..., "_is_deleted": true?}, ...],
   "config_columns": {...}, "dead_letters": N}      (not used here)

For each reader, every column in "types" must exist with exactly that type
(polars: the matching polars dtype), and the rows, matched by key, must equal
"rows" exactly: same keys, every listed column equal, and `_is_deleted`
equal (false when the expected row does not say). Other table columns
(_execution_id, stored envelope fields) are ignored. Values are compared in
the expectation's encoding: decimals as strings with exactly `scale`
fraction digits, dates "YYYY-MM-DD", timestamps "YYYY-MM-DDTHH:MM:SS.ffffffZ"
in UTC, binary as base64; ints, doubles and booleans must keep their kind
(True is not 1).

Prints "ok N rows" and exits 0 on success; prints every difference and exits
1 on a mismatch; exits 2 when the table cannot be read or the arguments are
wrong. Leaves with os._exit: deltalake may abort at interpreter exit after
the work is done.
"""
import base64
import datetime as dt
import decimal
import json
import os
import re
import sys

decimal.getcontext().prec = 100

UTC = dt.timezone.utc
_DECIMAL = re.compile(r"^decimal128\((\d+), (\d+)\)$")
_TIMESTAMP = re.compile(r"^timestamp\[(s|ms|us|ns)(?:, tz=([^\]]+))?\]$")
_INTS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


def leave(code):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# ------------------------------------------------------------------ readers

def read_deltalake(uri, options):
    """(column -> Arrow type string, rows as dicts) via deltalake."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(uri, storage_options=options or None)
    try:
        data = table.to_pyarrow_table()
    except Exception as e:  # noqa: BLE001 - fall back only for deletion vectors
        if "deletion" not in str(e).lower():
            raise
        from deltalake import QueryBuilder

        data = pa.table(QueryBuilder().register("t", table).execute("select * from t").read_all())
    types = {f.name: str(f.type) for f in data.schema}
    return types, data.to_pylist()


def read_polars(uri, options):
    """(column -> polars dtype, rows as dicts) via polars."""
    import polars as pl

    df = pl.read_delta(uri, storage_options=options or None)
    return dict(df.schema), df.to_dicts()


def polars_dtype(arrow):
    """The polars dtype that an Arrow type string must read as."""
    import polars as pl

    simple = {
        "int8": pl.Int8, "int16": pl.Int16, "int32": pl.Int32, "int64": pl.Int64,
        "uint8": pl.UInt8, "uint16": pl.UInt16, "uint32": pl.UInt32, "uint64": pl.UInt64,
        "float": pl.Float32, "double": pl.Float64, "bool": pl.Boolean,
        "string": pl.String, "large_string": pl.String, "binary": pl.Binary,
        "large_binary": pl.Binary, "date32[day]": pl.Date,
    }
    if arrow in simple:
        return simple[arrow]()
    m = _DECIMAL.match(arrow)
    if m:
        return pl.Decimal(int(m.group(1)), int(m.group(2)))
    m = _TIMESTAMP.match(arrow)
    if m:
        return pl.Datetime(m.group(1), m.group(2))
    raise ValueError(f"no polars dtype known for Arrow type {arrow!r}")


def same_polars_dtype(actual, expected):
    return actual == expected and repr(actual) == repr(expected)


# ------------------------------------------------------------------- values

def encode(value, arrow):
    """A reader's value in the expectation's JSON encoding (None stays None)."""
    if value is None:
        return None
    m = _DECIMAL.match(arrow)
    if m:
        scale = int(m.group(2))
        if not isinstance(value, decimal.Decimal):
            return ("not a Decimal", repr(value))
        text = format(value, f".{scale}f")
        if decimal.Decimal(text) != value:
            return ("digits beyond scale", str(value))
        return text
    if _TIMESTAMP.match(arrow):
        if not isinstance(value, dt.datetime):
            return ("not a datetime", repr(value))
        t = value.astimezone(UTC) if value.tzinfo else value
        return (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:"
                f"{t.second:02d}.{t.microsecond:06d}Z")
    if arrow.startswith("date32"):
        if not isinstance(value, dt.date) or isinstance(value, dt.datetime):
            return ("not a date", repr(value))
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if arrow in ("binary", "large_binary", "binary_view"):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            return ("not bytes", repr(value))
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def equal(actual, expected, arrow):
    """Exact, kind-aware equality of an encoded reader value and an expected one."""
    if actual is None or expected is None:
        return actual is None and expected is None
    if arrow in ("double", "float"):
        return (isinstance(actual, float) and isinstance(expected, (int, float))
                and not isinstance(expected, bool) and actual == float(expected))
    if arrow in _INTS:
        return (isinstance(actual, int) and not isinstance(actual, bool)
                and isinstance(expected, int) and not isinstance(expected, bool) and actual == expected)
    if arrow == "bool":
        return isinstance(actual, bool) and isinstance(expected, bool) and actual == expected
    return type(actual) is type(expected) and actual == expected


def show(v):
    return json.dumps(v, ensure_ascii=False, default=repr)


# ------------------------------------------------------------------- checks

def check(reader, types_of, rows, expected, same_type):
    """Differences (strings) between one reader's view and the expectation."""
    problems = []
    want_types = expected["types"]
    key = expected["key"]
    for col, arrow in want_types.items():
        if col not in types_of:
            problems.append(f"[{reader}] column {col!r} missing (want {arrow})")
        elif not same_type(types_of[col], arrow):
            problems.append(f"[{reader}] column {col!r} has type {types_of[col]} (want {arrow})")
    if "_is_deleted" not in types_of:
        problems.append(f"[{reader}] column '_is_deleted' missing")
    if key not in types_of:
        return problems

    actual = {}
    for r in rows:
        k = show(encode(r.get(key), want_types[key]))
        if k in actual:
            problems.append(f"[{reader}] key {key}={k} appears more than once")
        actual[k] = r
    wanted = {show(r[key]): r for r in expected["rows"]}

    for k in sorted(set(wanted) - set(actual)):
        problems.append(f"[{reader}] missing row {key}={k}: {show(wanted[k])}")
    for k in sorted(set(actual) - set(wanted)):
        extra = {c: encode(actual[k].get(c), a) for c, a in want_types.items()}
        problems.append(f"[{reader}] unexpected row {key}={k}: {show(extra)}")
    for k in sorted(set(wanted) & set(actual), key=lambda x: (len(x), x)):
        got, want = actual[k], wanted[k]
        for col, arrow in want_types.items():
            if col not in types_of:
                continue
            if col not in want:
                problems.append(f"[{reader}] {key}={k}: expected row lists no value for {col!r}")
                continue
            value = encode(got.get(col), arrow)
            if not equal(value, want[col], arrow):
                problems.append(f"[{reader}] {key}={k} {col}: got {show(value)}, want {show(want[col])}")
        if "_is_deleted" in types_of:
            deleted, want_deleted = got.get("_is_deleted"), want.get("_is_deleted", False)
            if deleted is not want_deleted:
                problems.append(f"[{reader}] {key}={k} _is_deleted: got {show(deleted)}, want {show(want_deleted)}")
    return problems


def main(argv):
    args, options = [], {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--storage-option" and i + 1 < len(argv):
            k, sep, v = argv[i + 1].partition("=")
            if not sep:
                print(f"--storage-option wants K=V, got {argv[i + 1]!r}")
                leave(2)
            options[k] = v
            i += 2
        elif a.startswith("--storage-option="):
            k, _, v = a.split("=", 1)[1].partition("=")
            options[k] = v
            i += 1
        else:
            args.append(a)
            i += 1
    if len(args) != 2:
        print(__doc__.split("\n\n")[1])
        leave(2)
    uri, expected_path = args
    with open(expected_path, encoding="utf-8") as fh:
        expected = json.load(fh)

    problems = []
    try:
        types_of, rows = read_deltalake(uri, options)
    except Exception as e:  # noqa: BLE001 - reported
        print(f"deltalake could not read {uri}: {type(e).__name__}: {e}")
        leave(2)
    problems += check("deltalake", types_of, rows, expected, lambda actual, want: actual == want)

    try:
        import polars  # noqa: F401
    except ImportError:
        print("polars is not installed (pip install polars); it is the second reader")
        leave(2)
    try:
        ptypes, prows = read_polars(uri, options)
    except Exception as e:  # noqa: BLE001 - reported
        print(f"polars could not read {uri}: {type(e).__name__}: {e}")
        leave(2)
    try:
        problems += check("polars", ptypes, prows, expected,
                          lambda actual, want: same_polars_dtype(actual, polars_dtype(want)))
    except ValueError as e:
        problems.append(f"[polars] {e}")

    if problems:
        print(f"{expected_path}: {len(problems)} difference(s) in {uri}")
        for p in problems:
            print("  " + p)
        leave(1)
    print(f"ok {len(expected['rows'])} rows")
    leave(0)


if __name__ == "__main__":
    main(sys.argv[1:])

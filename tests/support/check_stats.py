"""Checks a Delta table's per-file statistics against the files' contents,
and that delta-rs prunes files with them.

Usage: check_stats.py TABLE_DIR KEY_COLUMN KEY_VALUE

Prints one JSON object:
  files         live files (add actions)
  mismatches    statistics that disagree with the file they describe
  with_bounds   columns that have min/max statistics in every file
  wide          files whose stats say tightBounds false (deletion vectors)
  opened        files delta-rs' DataFusion reader opened for KEY = VALUE
  rows          rows that query returned
  held_empty    data columns a file holds that are NULL in all its rows
                (a file leaves such a column out; system columns, which
                start with `_`, stay)

The rules checked are the ones docs/commit-protocol.md ("File statistics") states:
strings cut to 32 characters (a longer maximum gets U+10FFFF appended),
timestamps floored to milliseconds, bounds omitted for NaN/binary/all-NULL.
"""

import datetime
import decimal
import json
import os
import re
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder

PREFIX = 32


def expected_bounds(col):
    """(min, max) as the writer should state them, or None."""
    t = col.type
    if col.null_count == len(col) or pa.types.is_binary(t):
        return None
    if pa.types.is_floating(t):
        if pc.any(pc.is_nan(col)).as_py() or pc.any(pc.is_inf(col)).as_py():
            return None
    mm = pc.min_max(col).as_py()
    lo, hi = mm["min"], mm["max"]
    if pa.types.is_string(t):
        lo = lo[:PREFIX]
        if len(hi) > PREFIX:
            hi = hi[:PREFIX] + chr(0x10FFFF)
    if pa.types.is_timestamp(t):
        lo = lo.replace(microsecond=lo.microsecond // 1000 * 1000)
        hi = hi.replace(microsecond=hi.microsecond // 1000 * 1000)
    return lo, hi


def same(a, b):
    if isinstance(a, datetime.datetime) and isinstance(b, datetime.datetime):
        return a.replace(tzinfo=None) == b.replace(tzinfo=None)
    if isinstance(b, decimal.Decimal):
        return decimal.Decimal(str(a)) == b
    return a == b


def main():
    table, key, value = sys.argv[1], sys.argv[2], sys.argv[3]
    dt = DeltaTable(table)
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    raw = {}
    # The stats JSON as written (tightBounds is not in the flattened view).
    for name in sorted(os.listdir(os.path.join(table, "_delta_log"))):
        if name.endswith(".json"):
            with open(os.path.join(table, "_delta_log", name)) as f:
                for line in f:
                    a = json.loads(line).get("add")
                    if a:
                        raw[a["path"]] = json.loads(a.get("stats") or "{}")
    mismatches, wide, bounded, held_empty = [], 0, None, []
    table_columns = [f.name for f in dt.schema().fields]
    # No table here sets delta.dataSkippingNumIndexedCols: the first 32
    # columns of the table (not of each file) have statistics.
    indexed = set(table_columns[:32])
    for add in adds:
        path = add["path"]
        data = pq.ParquetFile(os.path.join(table, path)).read()
        if raw.get(path, {}).get("tightBounds") is False:
            wide += 1
        if add["num_records"] != data.num_rows:
            mismatches.append(f"{path}: num_records {add['num_records']} != {data.num_rows}")
        cols = set()
        # A column the file leaves out is NULL in all its rows.
        for name in table_columns:
            nc = add.get(f"null_count.{name}")
            if name not in data.column_names and nc is not None and nc != data.num_rows:
                mismatches.append(f"{path}: null_count.{name} {nc} for a column it lacks")
        for name in data.column_names:
            col = data.column(name).combine_chunks()
            if data.num_rows and col.null_count == data.num_rows and not name.startswith("_"):
                held_empty.append(f"{path}: {name}")
            nc = add.get(f"null_count.{name}")
            if nc is not None and nc != col.null_count:
                mismatches.append(f"{path}: null_count.{name} {nc} != {col.null_count}")
            if name not in indexed:
                if nc is not None:
                    mismatches.append(f"{path}: {name} has statistics beyond the first 32 columns")
                continue
            want = expected_bounds(col)
            got = (add.get(f"min.{name}"), add.get(f"max.{name}"))
            if want is None:
                if any(g is not None for g in got):
                    mismatches.append(f"{path}: {name} has bounds {got}, expected none")
                continue
            if not (same(got[0], want[0]) and same(got[1], want[1])):
                mismatches.append(f"{path}: {name} bounds {got} != {want}")
            else:
                cols.add(name)
        bounded = cols if bounded is None else bounded & cols
    qb = QueryBuilder().register("t", dt)
    lit = value if re.fullmatch(r"-?\d+", value) else f"'{value}'"
    plan = pa.table(qb.execute(f"EXPLAIN ANALYZE SELECT * FROM t WHERE {key} = {lit}").read_all())
    text = "\n".join(r["plan"] for r in plan.to_pylist())
    opened = sum(int(n) for n in re.findall(r"files_opened=(\d+)", text))
    rows = pa.table(qb.execute(f"SELECT * FROM t WHERE {key} = {lit}").read_all()).num_rows
    print(
        json.dumps(
            {
                "files": len(adds),
                "mismatches": mismatches[:20],
                "with_bounds": sorted(bounded or []),
                "wide": wide,
                "opened": opened,
                "rows": rows,
                "held_empty": held_empty[:20],
            }
        ),
        flush=True,
    )
    # deltalake can abort at interpreter exit after the work is done.
    os._exit(0)


main()

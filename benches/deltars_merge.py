#!/usr/bin/env python3
"""delta-rs MERGE per micro-batch: the baseline `changelake bench` compares with.

What a user would write without changelake, on the same Debezium batch files:
parse the JSON lines (pyarrow's C++ reader), flatten the envelope, keep the
latest event per key (MERGE refuses duplicate source keys), then one MERGE:
delete when the event is a delete, update when it is at least as new as the
stored row, insert new keys. Timed per batch: parse, dedupe, MERGE.

  deltars_merge.py merge   --ours LAKE/bronze/account_scd1 --table DIR --out FILE [--format json] batch.jsonl...
  deltars_merge.py compare --ours LAKE/bronze/account_scd1 --table DIR

`merge` first copies the data columns of changelake's freshly loaded table
into a new delta-rs table, so both start from identical rows. `compare`
checks that both tables end with the same (key, sequence) pairs.

`--format json`: the batches are flat rows with `op` and `lsn` columns
(`changelake bench --format json`), read by pyarrow's JSON reader with the
table's schema.
"""
import argparse
import json
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from deltalake import DeltaTable, write_deltalake

KEY = "accountid"
# The sequence column: Debezium's `source.lsn` is stored as `source_lsn`;
# flat rows carry `lsn` (set by --format).
SEQ = "source_lsn"


def data_columns(schema):
    return [f for f in schema if not f.name.startswith("_")]


def init(ours, table):
    src = DeltaTable(ours)
    fields = data_columns(pa.schema(src.schema().to_arrow()))
    cols = [f.name for f in fields]
    t0 = time.perf_counter()
    # scan(): the reader that also handles merge-on-read (deletion vector) tables.
    reader = pa.RecordBatchReader.from_stream(src.scan(columns=cols))
    write_deltalake(table, reader, mode="overwrite")
    return pa.schema(fields), time.perf_counter() - t0


def parse(path, schema):
    after = pa.struct([f for f in schema if f.name != SEQ])
    envelope = pa.schema(
        [
            pa.field("before", after),
            pa.field("after", after),
            pa.field("source", pa.struct([pa.field("lsn", pa.int64())])),
            pa.field("op", pa.string()),
        ]
    )
    t = pj.read_json(path, parse_options=pj.ParseOptions(explicit_schema=envelope, unexpected_field_behavior="ignore"))
    before, aft = t.column("before"), t.column("after")
    is_delete = pc.equal(t.column("op"), "d")
    cols = {}
    for f in schema:
        if f.name == SEQ:
            cols[SEQ] = pc.struct_field(t.column("source"), "lsn")
        elif f.name == KEY:
            cols[KEY] = pc.if_else(is_delete, pc.struct_field(before, KEY), pc.struct_field(aft, KEY))
        else:
            cols[f.name] = pc.struct_field(aft, f.name)
    cols["op"] = t.column("op")
    return pa.table(cols)


def parse_flat(path, schema):
    # Flat rows: the table's own columns (op and lsn among them).
    opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    return pj.read_json(path, parse_options=opts)


def dedupe(t):
    t = t.take(pc.sort_indices(t, sort_keys=[(KEY, "ascending"), (SEQ, "descending")]))
    k = t.column(KEY).combine_chunks()
    if len(k) < 2:
        return t
    first = pc.fill_null(pc.not_equal(k.slice(1), k.slice(0, len(k) - 1)), True)
    return t.filter(pa.concat_arrays([pa.array([True]), first]))


def merge(table, source, cols):
    dt = DeltaTable(table)
    sets = {c: f"s.{c}" for c in cols}
    return (
        dt.merge(source=source, predicate=f"t.{KEY} = s.{KEY}", source_alias="s", target_alias="t")
        .when_matched_delete(predicate=f"s.op = 'd' AND s.{SEQ} >= t.{SEQ}")
        .when_matched_update(updates=sets, predicate=f"s.op <> 'd' AND s.{SEQ} >= t.{SEQ}")
        .when_not_matched_insert(updates=sets, predicate="s.op <> 'd'")
        .execute()
    )


def pairs(path, live_only):
    # scan() is delta-rs' DataFusion reader: it applies deletion vectors
    # (merge-on-read tables), which the pyarrow dataset path refuses.
    reader = pa.RecordBatchReader.from_stream(DeltaTable(path).scan(columns=[KEY, SEQ]))
    t = reader.read_all()
    return t.sort_by([(KEY, "ascending")])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["merge", "compare"])
    ap.add_argument("--ours", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--out")
    ap.add_argument("--format", choices=["debezium", "json"], default="debezium")
    ap.add_argument("batches", nargs="*")
    a = ap.parse_intermixed_args()
    global SEQ
    if a.format == "json":
        SEQ = "lsn"
    if a.mode == "compare":
        x, y = pairs(a.ours, True), pairs(a.table, True)
        same = x.equals(y)
        mismatch = None if same else f"changelake {x.num_rows} rows, delta-rs {y.num_rows} rows"
        print(json.dumps({"same_result": same, "rows": x.num_rows, "mismatch": mismatch}))
        return
    schema, init_s = init(a.ours, a.table)
    cols = [f.name for f in schema]
    runs = []
    for b in a.batches:
        t0 = time.perf_counter()
        t = parse_flat(b, schema) if a.format == "json" else parse(b, schema)
        t1 = time.perf_counter()
        s = dedupe(t)
        t2 = time.perf_counter()
        m = merge(a.table, s, cols)
        t3 = time.perf_counter()
        runs.append(
            {
                "events": t.num_rows,
                "parse_seconds": t1 - t0,
                "dedupe_seconds": t2 - t1,
                "merge_seconds": t3 - t2,
                "total_seconds": t3 - t0,
                "files_removed": m.get("num_removed_files"),
                "files_added": m.get("num_added_files"),
            }
        )
        print(f"delta-rs run {len(runs)}: {t3 - t0:.3f}s (MERGE {t3 - t2:.3f}s), files -{m.get('num_removed_files')} +{m.get('num_added_files')}", file=sys.stderr)
    with open(a.out, "w") as f:
        json.dump({"init_seconds": init_s, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()

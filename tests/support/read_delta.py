"""Reads a Delta table with Python `deltalake` (an independent reader) and
prints its rows as JSON lines, sorted, for the Rust tests to compare.

usage: read_delta.py URI OPTIONS_JSON [DROP_COLUMN ...]

Deletion vectors are honoured (QueryBuilder reads them). Leaves with
os._exit: deltalake may abort at interpreter exit after the work is done.
"""
import json
import os
import sys

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

uri, options, drop = sys.argv[1], json.loads(sys.argv[2]), set(sys.argv[3:])
try:
    dt = DeltaTable(uri, storage_options=options or None)
    result = QueryBuilder().register("t", dt).execute("select * from t").read_all()
    rows = pa.table(result).to_pylist()
    out = []
    for r in rows:
        out.append(json.dumps({k: v for k, v in r.items() if k not in drop}, sort_keys=True, default=str))
    out.sort()
    sys.stdout.write("\n".join(out) + ("\n" if out else ""))
    sys.stdout.flush()
    os._exit(0)
except Exception as e:  # noqa: BLE001 - reported to the test
    sys.stderr.write(f"read_delta: {type(e).__name__}: {e}\n")
    sys.stderr.flush()
    os._exit(1)

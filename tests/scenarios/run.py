#!/usr/bin/env python3
# Acceptance-scenario runner (same form as the acceptance checks): writes a
# config and one CSV per run, runs `changelake run --once`, reads the Delta
# table back with Python deltalake, an independent reader.
"""Run SCD scenarios against a changelake binary and check the Delta tables it
writes with an independent reader (python deltalake).

A scenario file (YAML) holds a table config in the seed format and a list of
runs. Each run writes the CSV input, calls `changelake run --config F --once`,
then reads <root>/bronze/<table> and compares rows.

Expectation keys per run:
  expect: list of rows (only the listed columns are compared), ordered by
          business key, then version order (sequence, then _execution_id).
  no_data_change: true -> the set of live data files is unchanged by the run.
  exec_unchanged: true -> every row keeps the _execution_id it had before.
  intervals: true      -> scd2 interval checks (late = empty, open = null/sentinel,
                          contiguous non-late versions per key).
Scenario-level:
  check_exit: N -> only run `changelake check` and expect exit code N.
  stderr_has: text that must appear in check's output.
"""
import os, subprocess, sys, tempfile, glob, json
import yaml
from deltalake import DeltaTable

BIN = os.environ.get("CHANGELAKE_BIN", "target/release/changelake")


def norm(v):
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        for cast in (int,):
            try:
                return cast(v)
            except ValueError:
                pass
        if v.lower() in ("true", "false"):
            return v.lower() == "true"
    return v


def read_table(path):
    dt = DeltaTable(path)
    rows = dt.to_pyarrow_table().to_pylist()
    return dt, rows


def live_files(dt):
    return sorted(dt.file_uris())


def sort_rows(rows, key, seq):
    def k(r):
        kk = tuple((r.get(c) is None, str(r.get(c))) for c in key)
        sq = tuple((r.get(c) is not None, norm(r.get(c)) if r.get(c) is not None else 0) for c in seq)
        return (kk, sq, norm(r.get("_execution_id")) if r.get("_execution_id") is not None else 0, str(r.get("_valid_from")))
    return sorted(rows, key=k)


def fail(name, msg):
    print(f"FAIL {name}: {msg}")
    return False


def run_scenario(path):
    sc = yaml.safe_load(open(path))
    name = sc.get("name", os.path.basename(path))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = yaml.safe_load(sc["config"])
        cfg.setdefault("storage", {"root": "lake"})
        cfgp = os.path.join(tmp, "changelake.yaml")
        with open(cfgp, "w") as f:
            yaml.safe_dump(cfg, f, sort_keys=False)
        if "check_exit" in sc:
            p = subprocess.run([BIN, "check", "--config", cfgp], capture_output=True, text=True, timeout=30)
            if p.returncode != sc["check_exit"]:
                return fail(name, f"check exit {p.returncode}, want {sc['check_exit']}: {(p.stdout+p.stderr)[-300:]}")
            for t in sc.get("stderr_has", []):
                if t.lower() not in (p.stdout + p.stderr).lower():
                    return fail(name, f"check output lacks {t!r}: {(p.stdout+p.stderr)[-300:]}")
            return True
        table = sc["table"]
        tcfg = cfg["bronze"]["tables"][table]
        key = tcfg["business_key"]
        seq = (tcfg.get("merge") or {}).get("sequence_by") or []
        system = cfg["systems"][tcfg["source"]["system"]]
        data_path = os.path.join(tmp, system["path"].replace("{object}", tcfg["source"]["object"]))
        os.makedirs(os.path.dirname(data_path), exist_ok=True)
        tpath = os.path.join(tmp, cfg["storage"]["root"], "bronze", table)
        prev_files, prev_exec = None, None
        for i, run in enumerate(sc["runs"], 1):
            with open(data_path, "w") as f:
                f.write(run["input"])
            p = subprocess.run([BIN, "run", "--config", cfgp, "--once"], capture_output=True, text=True, timeout=120, cwd=tmp)
            if p.returncode != 0:
                return fail(name, f"run {i}: exit {p.returncode}: {(p.stdout+p.stderr)[-400:]}")
            try:
                dt, rows = read_table(tpath)
            except Exception as e:
                return fail(name, f"run {i}: cannot read Delta table at bronze/{table}: {e}")
            rows = sort_rows(rows, key, seq)
            files = live_files(dt)
            if run.get("no_data_change") and prev_files is not None and files != prev_files:
                return fail(name, f"run {i}: data files changed on a no-op run")
            if run.get("exec_unchanged") and prev_exec is not None:
                now = {json.dumps([str(r.get(c)) for c in key] + [str(r.get("_valid_from"))]): r.get("_execution_id") for r in rows}
                if now != prev_exec:
                    return fail(name, f"run {i}: _execution_id changed on a run that should not bump it")
            if "expect" in run:
                exp = run["expect"]
                if len(rows) != len(exp):
                    return fail(name, f"run {i}: {len(rows)} rows, want {len(exp)}: got {[{k: r.get(k) for k in exp[0]} for r in rows] if exp else rows}")
                for j, (r, e) in enumerate(zip(rows, exp)):
                    for c, v in e.items():
                        if c == "_empty_interval":
                            got = r.get("_valid_from") is not None and r.get("_valid_from") == r.get("_valid_to")
                            if got != v:
                                return fail(name, f"run {i} row {j}: empty interval is {got}, want {v}: [{r.get('_valid_from')}, {r.get('_valid_to')})")
                            continue
                        if c not in r:
                            return fail(name, f"run {i}: column {c} missing; columns are {sorted(r)}")
                        if norm(r[c]) != norm(v):
                            return fail(name, f"run {i} row {j}: {c}={r[c]!r}, want {v!r}; row={ {k: r.get(k) for k in e} }")
            for c in run.get("unique_columns", []):
                vals = [r.get(c) for r in rows]
                if c not in (rows[0] if rows else {}) or len(set(vals)) != len(vals) or None in vals:
                    return fail(name, f"run {i}: column {c} missing, NULL or not unique: {vals}")
            if run.get("intervals"):
                ok = check_intervals(name, i, rows, key, run.get("open_valid_to"))
                if not ok:
                    return False
            prev_files = files
            prev_exec = {json.dumps([str(r.get(c)) for c in key] + [str(r.get("_valid_from"))]): r.get("_execution_id") for r in rows}
    return True


def check_intervals(name, i, rows, key, sentinel):
    by = {}
    for r in rows:
        by.setdefault(tuple(str(r.get(c)) for c in key), []).append(r)
    for k, vs in by.items():
        cur = [v for v in vs if v.get("_is_current")]
        if len(cur) > 1:
            return fail(name, f"run {i}: key {k} has {len(cur)} current versions")
        for v in vs:
            vf, vt = v.get("_valid_from"), v.get("_valid_to")
            if v.get("_is_current"):
                if sentinel is None and vt is not None:
                    return fail(name, f"run {i}: key {k} current version has _valid_to={vt}")
                if sentinel is not None and not str(vt).startswith(sentinel):
                    return fail(name, f"run {i}: key {k} current version _valid_to={vt}, want {sentinel}")
            else:
                if vt is None or vf is None or vt < vf:
                    return fail(name, f"run {i}: key {k} closed version has bad interval [{vf}, {vt})")
        # non-empty intervals must not overlap
        spans = sorted((v["_valid_from"], v["_valid_to"]) for v in vs
                       if v.get("_valid_from") is not None and (v.get("_valid_to") is None or v["_valid_to"] > v["_valid_from"]) and not v.get("_is_current"))
        for a, b in zip(spans, spans[1:]):
            if a[1] is not None and b[0] < a[1]:
                return fail(name, f"run {i}: key {k} overlapping intervals {a} {b}")
    return True


if __name__ == "__main__":
    files = sys.argv[1:] or sorted(glob.glob(os.path.join(os.path.dirname(__file__), "scenarios", "*.yaml")))
    if not os.path.exists(BIN):
        print(f"no binary at {BIN}: build with cargo build --release")
        sys.exit(1)
    passed = sum(1 for f in files if run_scenario(f))
    print(f"{passed} passed, {len(files) - passed} failed")
    sys.exit(0 if passed == len(files) else 1)

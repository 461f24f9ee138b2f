#!/usr/bin/env python3
"""A Hrana-over-HTTP test double for the libSQL store, on Python's own sqlite3.

NOT sqld: it serves the part of the Hrana 3 HTTP protocol (JSON) that the `libsql` 0.10
remote client uses (`/v3/pipeline`: execute, batch, get_autocommit, close, sequence;
`/v3/cursor`: one batch as NDJSON), so `anarchon-libsql` can be run against the whole
conformance kit on a machine without sqld. Each baton is one SQLite connection on one file;
an interactive transaction keeps its connection until COMMIT/ROLLBACK/close. The server's
semantics (locking, stream expiry, auth) are SQLite's and this file's, not sqld's: a pass
here checks the client side (requests, parameters, rows, transactions), not sqld itself.
`GET /stats` answers `{"requests": n}`: the HTTP requests served so far, for tests that
count what an operation costs.

    python3 hrana_double.py --db /tmp/libsql.db --port 8089 &
    ANARCHON_LIBSQL_URL=http://127.0.0.1:8089 cargo test -p anarchon-libsql
"""

import argparse
import base64
import itertools
import json
import os
import re
import sqlite3
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STREAMS = {}
LOCK = threading.Lock()
# HTTP requests served (POST), for tests that count what an operation costs: GET /stats.
REQUESTS = itertools.count(1)
SERVED = [0]
COUNTER = itertools.count(1)
DB = None


def connect():
    conn = sqlite3.connect(DB, isolation_level=None, check_same_thread=False, timeout=5.0)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def decode(v):
    t = v.get("type")
    if t == "null":
        return None
    if t == "integer":
        return int(v["value"])
    if t == "float":
        return float(v["value"])
    if t == "text":
        return v["value"]
    if t == "blob":
        return base64.b64decode(v.get("base64", ""))
    raise ValueError(f"unknown value type {t!r}")


def encode(x):
    if x is None:
        return {"type": "null"}
    if isinstance(x, bool):
        return {"type": "integer", "value": str(int(x))}
    if isinstance(x, int):
        return {"type": "integer", "value": str(x)}
    if isinstance(x, float):
        return {"type": "float", "value": x}
    if isinstance(x, bytes):
        return {"type": "blob", "base64": base64.b64encode(x).decode()}
    return {"type": "text", "value": str(x)}


def error(e):
    code = "SQLITE_ERROR"
    if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
        code = "SQLITE_BUSY"
    return {"message": str(e), "code": code}


def run_stmt(conn, stmt):
    args = [decode(a) for a in stmt.get("args") or []]
    if stmt.get("named_args"):
        raise ValueError("named args are not supported by this double")
    before = conn.total_changes
    cur = conn.execute(stmt["sql"], args)
    cols = [{"name": d[0], "decltype": None} for d in (cur.description or [])]
    rows = cur.fetchall()
    changed = conn.total_changes - before
    return {
        "cols": cols,
        "rows": [[encode(x) for x in r] for r in rows] if stmt.get("want_rows", True) else [],
        "affected_row_count": changed,
        "last_insert_rowid": str(cur.lastrowid) if cur.lastrowid else None,
        "replication_index": None,
        "rows_read": 0,
        "rows_written": 0,
        "query_duration_ms": 0.0,
    }


def describe(conn, sql):
    """Parameters and result columns without running the statement (enough for this client)."""
    nums = [int(n) for n in re.findall(r"\?(\d+)", sql)]
    count = max(nums) if nums else sql.count("?")
    head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    cols = []
    if head in ("SELECT", "WITH", "VALUES"):
        cur = conn.execute(f"SELECT * FROM ({sql}) LIMIT 0", [None] * count)
        cols = [d[0] for d in cur.description or []]
    elif re.search(r"\bRETURNING\b", sql, re.I):
        tail = re.split(r"\bRETURNING\b", sql, flags=re.I)[-1]
        cols = [c.strip() for c in tail.split(",")]
    return {
        "params": [{"name": None} for _ in range(count)],
        "cols": [{"name": c, "decltype": None} for c in cols],
        "is_explain": head == "EXPLAIN",
        "is_readonly": head in ("SELECT", "WITH", "VALUES"),
    }


def cond_ok(cond, results, errors):
    if cond is None:
        return True
    t = cond["type"]
    if t == "ok":
        return results[cond["step"]] is not None
    if t == "error":
        return errors[cond["step"]] is not None
    if t == "not":
        return not cond_ok(cond["cond"], results, errors)
    if t == "and":
        return all(cond_ok(c, results, errors) for c in cond["conds"])
    if t == "or":
        return any(cond_ok(c, results, errors) for c in cond["conds"])
    if t == "is_autocommit":
        return True
    raise ValueError(f"unknown condition {t!r}")


def run_batch(conn, batch):
    results, errors = [], []
    for step in batch["steps"]:
        if not cond_ok(step.get("condition"), results, errors):
            results.append(None)
            errors.append(None)
            continue
        try:
            results.append(run_stmt(conn, step["stmt"]))
            errors.append(None)
        except Exception as e:  # noqa: BLE001 - every SQLite error is a step error
            results.append(None)
            errors.append(error(e))
    return results, errors


# Like sqld, a stream unused for this long is closed and its transaction rolled back, so a
# client that went away (a dropped future, an ended test runtime) cannot hold the lock.
STREAM_EXPIRY_S = 5.0


def take_stream(baton):
    with LOCK:
        if baton and baton in STREAMS:
            return baton, STREAMS.pop(baton)[0]
    return None, connect()


def keep_stream(conn):
    baton = f"b{next(COUNTER)}"
    with LOCK:
        STREAMS[baton] = (conn, time.monotonic())
    return baton


def reap():
    while True:
        time.sleep(0.5)
        now = time.monotonic()
        with LOCK:
            old = [b for b, (_, t) in STREAMS.items() if now - t > STREAM_EXPIRY_S]
            conns = [STREAMS.pop(b)[0] for b in old]
        for conn in conns:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                conn.close()
            except Exception:  # noqa: BLE001
                pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY every answer would wait
    # for the client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, body, status=200, ctype="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.split("?")[0].rstrip("/") == "/stats":
            self.reply(json.dumps({"requests": SERVED[0]}))
            return
        self.reply("{}")

    def do_POST(self):
        with LOCK:
            SERVED[0] = next(REQUESTS)
        length = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(length) or b"{}")
        path = self.path.split("?")[0].rstrip("/")
        _, conn = take_stream(req.get("baton"))
        closed = False
        if path.endswith("/pipeline"):
            out = []
            for r in req.get("requests", []):
                t = r["type"]
                try:
                    if t == "execute":
                        res = run_stmt(conn, r["stmt"])
                        out.append({"type": "ok", "response": {"type": "execute", "result": res}})
                    elif t == "batch":
                        results, errors = run_batch(conn, r["batch"])
                        out.append({"type": "ok", "response": {"type": "batch", "result": {
                            "step_results": results, "step_errors": errors,
                            "replication_index": None}}})
                    elif t == "sequence":
                        conn.executescript(r["sql"])
                        out.append({"type": "ok", "response": {"type": "sequence"}})
                    elif t == "describe":
                        out.append({"type": "ok", "response": {
                            "type": "describe", "result": describe(conn, r["sql"])}})
                    elif t == "get_autocommit":
                        out.append({"type": "ok", "response": {
                            "type": "get_autocommit", "is_autocommit": not conn.in_transaction}})
                    elif t == "close":
                        closed = True
                        out.append({"type": "ok", "response": {"type": "close"}})
                    else:
                        out.append({"type": "error", "error": {"message": f"unsupported {t}", "code": "UNSUPPORTED"}})
                        print("UNSUPPORTED", r, file=sys.stderr, flush=True)
                except Exception as e:  # noqa: BLE001
                    out.append({"type": "error", "error": error(e)})
            baton = None
            if closed:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                conn.close()
            else:
                baton = keep_stream(conn)
            self.reply(json.dumps({"baton": baton, "base_url": None, "results": out}))
        elif path.endswith("/cursor"):
            results_lines = []
            baton = keep_stream(conn)
            results_lines.append(json.dumps({"baton": baton, "base_url": None}))
            for i, step in enumerate(req["batch"]["steps"]):
                try:
                    res = run_stmt(conn, step["stmt"])
                    results_lines.append(json.dumps({"type": "step_begin", "step": i, "cols": res["cols"]}))
                    for row in res["rows"]:
                        results_lines.append(json.dumps({"type": "row", "row": row}))
                    results_lines.append(json.dumps({
                        "type": "step_end", "affected_row_count": res["affected_row_count"],
                        "last_insert_rowid": res["last_insert_rowid"]}))
                except Exception as e:  # noqa: BLE001
                    results_lines.append(json.dumps({"type": "step_error", "step": i, "error": error(e)}))
            self.reply("\n".join(results_lines) + "\n", ctype="text/plain")
        else:
            self.reply(json.dumps({"error": "not found"}), status=404)


def main():
    global DB
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--port", type=int, default=8089)
    p.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        help="exit when standard input closes (the test process that started us ended)",
    )
    a = p.parse_args()
    if a.exit_on_stdin_eof:
        def watch_stdin():
            sys.stdin.read()
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.remove(DB + suffix)
                except OSError:
                    pass
            os._exit(0)

        threading.Thread(target=watch_stdin, daemon=True).start()
    DB = a.db
    threading.Thread(target=reap, daemon=True).start()
    ThreadingHTTPServer(("127.0.0.1", a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()

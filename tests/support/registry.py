"""A stand-in for a Confluent schema registry, for the Avro tests only.

No schema-registry server can be installed on the test machines, so this
serves the subset of the Confluent REST API that confluent-kafka's
AvroSerializer and changelake use, on a loopback port:

  POST /subjects/{subject}/versions   register (the same schema text gets the same id)
  GET  /schemas/ids/{id}              the schema text of an id (404 when unknown)

Compatibility checks are not implemented. The registered schemas are kept in
a JSON file, so a registry stopped and started again (the outage test)
answers with the same ids, as a real registry backed by Kafka would.

Usage: registry.py PORT STATE_FILE
"""

import json
import os
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
STATE = sys.argv[2]


def load():
    if os.path.exists(STATE):
        with open(STATE) as f:
            return json.load(f)
    return {"schemas": [], "subjects": {}}


state = load()


def save():
    tmp = STATE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, STATE)


class Handler(BaseHTTPRequestHandler):
    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        m = re.fullmatch(r"/subjects/([^/?]+)/versions(\?.*)?", self.path)
        if not m:
            return self.answer(404, {"error_code": 404, "message": "not found"})
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        text = body.get("schema")
        if text is None:
            return self.answer(422, {"error_code": 42201, "message": "no schema"})
        if text in state["schemas"]:
            sid = state["schemas"].index(text) + 1
        else:
            state["schemas"].append(text)
            sid = len(state["schemas"])
        versions = state["subjects"].setdefault(m.group(1), [])
        if sid not in versions:
            versions.append(sid)
        save()
        return self.answer(200, {"id": sid})

    def do_GET(self):
        m = re.fullmatch(r"/schemas/ids/(\d+)(\?.*)?", self.path)
        if m:
            sid = int(m.group(1))
            if 1 <= sid <= len(state["schemas"]):
                return self.answer(200, {"schema": state["schemas"][sid - 1]})
            return self.answer(404, {"error_code": 40403, "message": "Schema not found"})
        return self.answer(404, {"error_code": 404, "message": "not found"})

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()

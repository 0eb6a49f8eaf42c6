"""A fault-injecting HTTP proxy for the object-store tests (loopback only).

usage: faulty_proxy.py LISTEN_PORT UPSTREAM_PORT RATE SEED [--strip-if-none-match]

Forwards every request to 127.0.0.1:UPSTREAM_PORT. A fraction RATE of the
requests meets a fault, chosen at random:
  503    answered "503 SlowDown" without reaching the store
  reset  the connection is closed before the request reaches the store
  lost   the request reaches the store, its answer is dropped (the client
         cannot know whether a write landed)
  delay  forwarded after 300 ms
--strip-if-none-match removes the conditional header (a store that ignores
it). Each fault is printed as one line on stdout, for the test to count.
"""
import http.client
import random
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

listen, upstream, rate, seed = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
strip = "--strip-if-none-match" in sys.argv
rng = random.Random(seed)
lock = threading.Lock()
HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


def fault():
    with lock:
        if rng.random() >= rate:
            return None
        return rng.choice(["503", "reset", "lost", "delay"])


def note(kind, method, path):
    with lock:
        print(f"{kind} {method} {path}", flush=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        kind = fault()
        if kind:
            note(kind, self.command, self.path)
        if kind == "503":
            msg = b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        if kind == "reset":
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.close()
            return
        if kind == "delay":
            time.sleep(0.3)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        if strip:
            headers = {k: v for k, v in headers.items() if k.lower() != "if-none-match"}
        conn = http.client.HTTPConnection("127.0.0.1", upstream, timeout=60)
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if kind == "lost":
            self.close_connection = True
            self.connection.close()
            return
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


ThreadingHTTPServer.allow_reuse_address = True
server = ThreadingHTTPServer(("127.0.0.1", listen), Handler)
server.daemon_threads = True
print("ready", flush=True)
server.serve_forever()

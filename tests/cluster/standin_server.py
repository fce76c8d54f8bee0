"""Stand-in container for cluster tests: a tiny HTTP server on $POD_IP.

usage: standin_server.py PORT TAG [--ready-after S] [--ignore-term]

GET /            {"pod", "tag", "pid", "ip"}
GET /health      200 once --ready-after seconds have passed (503 before)
GET /v1/models   OpenAI-style model list naming TAG
GET /metrics     Prometheus text: standin_up 1, standin_requests_total N
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("tag")
    parser.add_argument("--ready-after", type=float, default=0.0)
    parser.add_argument("--ignore-term", action="store_true")
    opts = parser.parse_args()
    began = time.monotonic()
    requests = [0]
    ip = os.environ["POD_IP"]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests[0] += 1
            if self.path == "/metrics":
                body = (f'standin_up{{tag="{opts.tag}"}} 1\n'
                        f"standin_requests_total {requests[0]}\n").encode()
                self._send(200, body, "text/plain; version=0.0.4")
            elif self.path == "/health":
                ok = time.monotonic() - began >= opts.ready_after
                self._send(200 if ok else 503, b"{}", "application/json")
            elif self.path == "/v1/models":
                body = json.dumps({"object": "list", "data": [{"id": opts.tag}]}).encode()
                self._send(200, body, "application/json")
            else:
                info = {"pod": os.environ.get("POD_NAME"), "tag": opts.tag,
                        "pid": os.getpid(), "ip": ip}
                self._send(200, json.dumps(info).encode(), "application/json")

        def _send(self, code: int, body: bytes, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((ip, opts.port), Handler)
    if opts.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"standin {opts.tag} listening on {ip}:{opts.port}", flush=True)
    server.serve_forever()
    print("standin stopped by SIGTERM", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

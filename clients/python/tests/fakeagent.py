"""A stand-in for `sluice agent`'s HTTP API, for the client's unit tests:
it serves scripted batches to ranks as the contract says (W consecutive
batches of an epoch form a step; rank r gets the r-th) and records every
request."""

import json
import queue
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from sluice.safetensors import encode


def make_batch(epoch, step, keys, rank=0, world_size=1, last=False, position=None, job="j", legacy=False, side=4, epoch_failed=None,
               tensors=None):
    """tensors: when set, a function of the keys giving the batch's arrays
    (else an image and a label made from each key)."""
    if tensors is None:
        n = len(keys)
        image = np.full((n, side, side, 3), 0, dtype=np.uint8)
        for i, k in enumerate(keys):
            image[i] = int(k) % 256
        arrays = {"image": image, "label": np.array([int(k) for k in keys], dtype=np.int64)}
    else:
        arrays = tensors(keys)
    meta = {"job": job, "epoch": str(epoch), "keys": json.dumps(keys)}
    if not legacy:
        meta.update({"step": str(step), "rank": str(rank), "world_size": str(world_size),
                     "last_step": "true" if last else "false",
                     "position": json.dumps(position if position is not None else {"e": epoch, "s": step})})
        if last and epoch_failed is not None:
            meta["epoch_failed"] = str(epoch_failed)
    return encode(arrays, meta)


class FakeAgent:
    """epochs: a list per epoch of lists of keys, the per-rank batches of a
    world of 1 (steps are then grouped by world_size). token: when set,
    every request must carry it (`Authorization: Bearer`), as the agent's
    --agent-token-file makes it; others get 401 and change nothing.
    close_idle: close each connection after its answer, without saying so,
    as the agent does to a kept-alive connection its idle timeout passed;
    each close is put on `closed`. tensors: the batches' arrays as a
    function of their keys (make_batch's)."""

    def __init__(self, epochs, world_size=1, legacy=False, job="j", token=None, close_idle=False, tensors=None):
        self.epochs, self.world_size, self.legacy, self.job = epochs, world_size, legacy, job
        self.tensors = tensors
        self.token, self.close_idle = token, close_idle
        self.closed = queue.Queue()
        self.auth = []  # the Authorization header of each request (None: none)
        self.requests = []  # (method, path, query dict, body), those let in
        self.next_step = {}  # rank -> (epoch, step)
        self.fail = None  # a function(handler) -> True when it answered instead
        self.epoch_failed = {}  # epoch -> what its last step's epoch_failed says
        self.lock = threading.Lock()
        agent = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                agent._handle(self, "GET")

            def do_POST(self):
                agent._handle(self, "POST")

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def shutdown_request(self, request):
                super().shutdown_request(request)
                agent.closed.put(True)

            def handle_error(self, request, client_address):
                pass  # a client that went away mid-answer: what some tests do

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def steps(self, epoch):
        b = self.epochs[epoch]
        w = self.world_size
        return [b[i:i + w] for i in range(0, len(b), w)]

    def _handle(self, h, method):
        u = urllib.parse.urlsplit(h.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        with self.lock:
            self.auth.append(h.headers.get("Authorization"))
        if self.close_idle:
            h.close_connection = True
        if self.token is not None and h.headers.get("Authorization") != "Bearer " + self.token:
            h.close_connection = True  # the body, if any, is not read
            return self._send(h, 401, b"this endpoint wants a bearer token", headers={"WWW-Authenticate": 'Bearer realm="sluice"'})
        body = h.rfile.read(int(h.headers.get("Content-Length", 0) or 0)) if method == "POST" else b""
        with self.lock:
            self.requests.append((method, u.path, q, body))
        if self.fail is not None and self.fail(h):
            return
        if method == "POST" and u.path == "/v1/resume":
            state = json.loads(body)
            self.world_size = int(q["world_size"])
            with self.lock:
                self.next_step = {}
                self.resume_from = (state["epoch"], state["step"])
            return self._send(h, 200, json.dumps({"resumed": True, "replayed_shards": 0}).encode(), "application/json")
        if method != "GET" or u.path != "/v1/batch":
            return self._send(h, 404, b"not found")
        rank, ws = int(q.get("rank", 0)), int(q.get("world_size", 1))
        if ws != self.world_size:
            return self._send(h, 409, f"world_size {ws}, but the job's is {self.world_size}".encode())
        with self.lock:
            start = getattr(self, "resume_from", (0, 0))
            epoch, step = self.next_step.get(rank, start)
            if epoch < len(self.epochs) and step >= len(self.steps(epoch)):
                epoch, step = epoch + 1, 0
            if epoch >= len(self.epochs):
                return self._send(h, 410, b"every batch was delivered", headers={"Sluice-End": "delivered"})
            self.next_step[rank] = (epoch, step + 1)
        steps = self.steps(epoch)
        group = steps[step]
        keys = group[rank] if rank < len(group) else []
        data = make_batch(epoch, step, keys, rank, ws, last=step == len(steps) - 1, job=self.job, legacy=self.legacy,
                          epoch_failed=self.epoch_failed.get(epoch, 0), tensors=self.tensors)
        self._send(h, 200, data)

    def _send(self, h, status, body, ctype="text/plain", headers=None):
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

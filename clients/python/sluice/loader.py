"""Loader: a job's batches for one rank, read from a `sluice agent`.

Protocol (the agent's HTTP API, see the repository README):

    GET  /v1/batch?rank=R&world_size=W&steps=N&wait_s=X&compute_s=Y
         200: a safetensors body; metadata job, epoch, step, keys (JSON),
              rank, world_size, last_step ("true" on an epoch's last step),
              position (JSON, opaque to the client), epoch_failed (on an
              epoch's last step: its samples that could not be
              preprocessed or whose shard failed; the agent's /v1/stats
              lists them)
         410: no more batches for this rank (Sluice-End: delivered) or the
              job ended (Sluice-End: ended; the body says why)
         409: another world size, or a conflicting resume
         503: the agent stopped
    POST /v1/resume?rank=R&world_size=W[&generation=G]   body: a state dict
         409: another rank of this generation resumed from another state
         401: the agent wants its token (see Loader: token)
"""

import http.client
import json
import os
import queue
import re
import selectors
import sys
import threading
import time
import urllib.parse
import warnings

from .errors import AgentError, CorruptBatch, JobEnded
from .safetensors import parse
from .unixsock import UnixConnection

STATE_VERSION = 1

# Keys of a batch dict that are not tensors.
KEY = "__key__"
EPOCH = "__epoch__"
STEP = "__step__"
SOURCE = "__source__"  # a mixed job's: each row's source, an index into the job spec's sources

_END = object()  # the agent said every batch of this rank was delivered

# Where the agent's token comes from when not passed: the file the first
# names, else the second itself (the agent reads the same variables).
TOKEN_FILE_ENV = "SLUICE_AGENT_TOKEN_FILE"
TOKEN_ENV = "SLUICE_AGENT_TOKEN"

# A token as the agent accepts it: RFC 6750's b64token, 16 to 4096 bytes.
_TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_TOKEN_MIN, _TOKEN_MAX = 16, 4096


_GENERATION_RE = re.compile(r"[!-~]{1,128}")


def _check_generation(value):
    """value, checked as a generation (what the agent accepts)."""
    if not isinstance(value, str) or not _GENERATION_RE.fullmatch(value):
        raise ValueError(f"generation {value!r:.64}: want 1 to 128 printable ASCII characters, no spaces")
    return value


def torchrun_generation():
    """The launch torchrun (torch.distributed.elastic) started this process
    in: its run id and restart count, the same on every rank of a launch;
    None outside torchrun."""
    run, restarts = os.environ.get("TORCHELASTIC_RUN_ID"), os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if not run or restarts is None:
        return None
    g = f"{run}.{restarts}"
    return g if _GENERATION_RE.fullmatch(g) else None


def _check_token(value, where):
    """value, checked as a token; errors name where, never the value."""
    if len(value) < _TOKEN_MIN:
        raise ValueError(f"agent token from {where}: {len(value)} bytes, want at least {_TOKEN_MIN}")
    if len(value) > _TOKEN_MAX:
        raise ValueError(f"agent token from {where}: {len(value)} bytes, want at most {_TOKEN_MAX}")
    if not _TOKEN_RE.fullmatch(value):
        raise ValueError(f"agent token from {where}: want letters, digits and -._~+/ (then = padding) only")
    return value


def _read_token_file(path, where):
    try:
        with open(path, "rb") as f:
            data = f.read(_TOKEN_MAX + 1024)
    except OSError as e:
        raise ValueError(f"agent token from {where} {path}: {e.strerror or e}") from None
    value = data.decode("utf-8", "replace").strip()
    if not value:
        raise ValueError(f"agent token from {where} {path}: empty")
    return _check_token(value, f"{where} {path}")


def load_token(token=None, token_file=None, environ=None):
    """The agent's token: token itself, else the file token_file names,
    else the file $SLUICE_AGENT_TOKEN_FILE names, else
    $SLUICE_AGENT_TOKEN; None when none is given. A ValueError names the
    source of a bad token, never its value."""
    env = os.environ if environ is None else environ
    if token is not None:
        return _check_token(str(token).strip(), "the token argument")
    if token_file:
        return _read_token_file(token_file, "token_file")
    if env.get(TOKEN_FILE_ENV):
        return _read_token_file(env[TOKEN_FILE_ENV], TOKEN_FILE_ENV)
    if env.get(TOKEN_ENV):
        return _check_token(env[TOKEN_ENV].strip(), TOKEN_ENV)
    return None


def _peer_closed(sock):
    """Whether a kept-alive connection was closed by the agent while idle
    (it is readable with no request out: its end, or junk). Reusing it
    would lose the next request, so a new one is opened instead, before
    anything is sent."""
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_READ)
        return bool(sel.select(0))


class _Failure:
    def __init__(self, exc):
        self.exc = exc


class _Item:
    """A batch as the prefetch thread hands it over, with what the state
    needs once the training loop takes it."""

    __slots__ = ("batch", "epoch", "step", "last_step", "position", "job", "reader", "failed")

    def __init__(self, batch, epoch, step, last_step, position, job, reader, failed=0):
        self.batch, self.epoch, self.step, self.last_step = batch, epoch, step, last_step
        self.position, self.job, self.reader, self.failed = position, job, reader, failed


class Loader:
    """Iterates a job's batches for one rank of a data-parallel trainer.

    Each batch is a dict of numpy arrays that view the response body
    (`image` uint8 [N,H,W,3] or the pipeline's dtype, `label` int64 [N],
    ...), plus `__key__` (the N sample keys), `__epoch__` and `__step__`;
    in a job that mixes datasets, `__source__` (each row's source: its
    index in the job spec's sources).
    N is the job's per-rank batch size; an epoch's last step may give fewer
    rows, and when fewer samples than ranks remain, a rank may get a batch
    of zero rows (every rank takes the same number of steps, as DDP needs).

    Epochs are explicit: `for batch in loader` yields the rest of the
    current epoch and stops after its last step; the next `for` goes on
    with the next epoch. `loader.epochs()` yields one such iterator per
    epoch left. `loader.epoch` and `loader.step` are the next step the
    loop will take; `loader.done` is set once the agent said this rank got
    every batch.

    A background thread keeps up to `prefetch` batches ready, over one
    keep-alive connection. The time the loop is blocked waiting for a batch
    and the time it spends between batches (its compute) are sent to the
    agent as cumulative totals on each request: they are the job's demand
    signal.

    `state_dict()` is the position to save in a checkpoint;
    `load_state_dict(state)` (before iterating) makes the first request a
    POST /v1/resume, so that the samples the checkpointed model had not
    consumed come exactly once, split over this run's ranks, whatever its
    world size.

    If the agent dies or the connection breaks, iteration raises
    AgentError: restart the training script from its last checkpoint.

    The prefetch thread lives until the rank got every batch, or close()
    (or leaving a `with Loader(...)` block): a loader dropped mid-epoch
    without close() keeps its thread (a daemon) until the process ends.
    """

    def __init__(self, url, rank=0, world_size=1, prefetch=2, timeout=300.0,
                 connect_timeout=30.0, drop_last=False, convert=None, reader="trainer",
                 token=None, token_file=None, generation=None):
        """url: the agent, e.g. "http://127.0.0.1:8081", or on the same
        node its --listen-unix socket, "unix:/run/sluice/agent.sock" (the
        batches then come as memfds this process maps: it copies nothing;
        "http+unix://%2Frun%2Fsluice%2Fagent.sock/r/READER" for a reader of
        a job with several). rank, world_size:
        this process's place in the data-parallel group. prefetch: batches
        kept ready (>= 1). timeout: seconds one read from the agent may
        block (a batch can take long at a job's start). connect_timeout:
        how long to retry a refused connection (the agent starting).
        drop_last: leave out each epoch's incomplete last step (the agent
        reports its samples as dropped). convert: a function applied to
        each batch dict in the prefetch thread (sluice.torch uses it to
        make tensors). reader: the agent's --reader, for the state dict
        (a batch that names its reader overrides it). token, token_file:
        the agent's token (its --agent-token-file or SLUICE_AGENT_TOKEN),
        sent as `Authorization: Bearer` with every request; by default
        read from the file $SLUICE_AGENT_TOKEN_FILE names, else from
        $SLUICE_AGENT_TOKEN; none when neither is set (an agent on
        loopback without a token). generation: the trainer's run this
        rank is of, the same string for every rank of one launch and
        another for each launch (printable ASCII, at most 128 bytes): it
        tells the agent that a resume is a new launch's rather than a late
        rank's. By default torchrun's (TORCHELASTIC_RUN_ID and
        TORCHELASTIC_RESTART_COUNT); sluice.torch broadcasts one from rank
        0 otherwise. Without one the agent goes by which ranks resumed,
        which a launch killed during its resume can mislead."""
        self._unix, self._host, self._port, self._base = _agent_address(url)
        if not (0 <= rank < world_size):
            raise ValueError(f"rank {rank} of world_size {world_size}: want 0 <= rank < world_size")
        if prefetch < 1:
            raise ValueError(f"prefetch {prefetch}: want >= 1")
        self.url = url
        self.rank, self.world_size = int(rank), int(world_size)
        self.prefetch = prefetch
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self.drop_last = bool(drop_last)
        self._convert = convert
        tok = load_token(token, token_file)
        # The header, not the token, is kept: nothing prints it.
        self._auth = {"Authorization": "Bearer " + tok} if tok else {}
        self.generation = _check_generation(generation) if generation is not None else torchrun_generation()
        self._generation_later = False  # sluice.torch agrees on one at the first iteration
        # Consumer side: the training loop's position and timings.
        self.epoch, self.step = 0, 0
        self.done = False
        self.resume_info = None  # the agent's answer to /v1/resume
        # epoch -> samples not in it (failed preprocessing or a shard that
        # failed), from the epoch's last step; a warning says so too.
        self.failed_samples = {}
        self._position = None
        self._job, self._reader = None, reader
        self._resume = None
        self._pending = None  # an item taken but not yet yielded
        self._failed = None
        self._steps = 0
        self._wait_s = 0.0
        self._compute_s = 0.0
        self._lock = threading.Lock()  # the totals, read by the prefetch thread
        # Producer side.
        self._queue = None
        self._thread = None
        self._stop = threading.Event()
        self._conn = None
        self._counted = (None, -1)  # the (epoch, step) of the last batch fetched
        self._pool = []  # response buffers, reused once no batch views them

    # -- state ---------------------------------------------------------------

    def state_dict(self):
        """The loader's position, JSON-serialisable: the next step the
        training loop takes and the agent's position after the last batch
        it took (not those prefetched)."""
        return {
            "v": STATE_VERSION, "job": self._job, "reader": self._reader,
            "epoch": self.epoch, "step": self.step, "world_size": self.world_size,
            "position": self._position,
        }

    def load_state_dict(self, state):
        """Resumes from a state_dict() saved by any rank of an earlier run
        (with any world size; DDP ranks are in step, so rank 0's will do).
        Must come before the first batch is asked for."""
        if self._thread is not None:
            raise RuntimeError("load_state_dict after iteration started: call it before the first batch")
        if not isinstance(state, dict) or state.get("v") != STATE_VERSION:
            raise ValueError(f"loader state: want a dict with v={STATE_VERSION}, got {state!r:.200}")
        missing = [k for k in ("job", "reader", "epoch", "step", "world_size", "position") if k not in state]
        if missing:
            raise ValueError(f"loader state: missing {', '.join(missing)}")
        if self.generation is None and self.world_size > 1 and not self._generation_later:
            warnings.warn("sluice: a resume of several ranks without a generation: the agent cannot tell a rank of "
                          "a new launch from a late rank of one killed during its resume; pass generation= (the same "
                          "for every rank of a launch), or run under torchrun or sluice.torch", stacklevel=2)
        self._resume = dict(state)
        self._job, self._reader = state["job"], state["reader"]
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self._position = state["position"]

    # -- iteration -----------------------------------------------------------

    def __iter__(self):
        """The batches of the rest of the current epoch."""
        cur = None
        while True:
            item = self._take()
            if item is _END:
                return
            if cur is None:
                cur = item.epoch
            elif item.epoch != cur:
                # An agent that sends no last_step: the epoch ended with
                # the batch before this one.
                self._pending = item
                return
            self._taken(item)
            t = time.perf_counter()
            yield item.batch
            with self._lock:
                self._compute_s += time.perf_counter() - t
            if item.last_step:
                return

    def epochs(self):
        """Yields one iterator per epoch left (the current one first, when
        resumed mid-epoch); loader.epoch says which."""
        while True:
            item = self._take()
            if item is _END:
                return
            self._pending = item
            yield iter(self)

    def close(self):
        """Stops the prefetch thread and closes the connection."""
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(2)  # wakes a blocked read
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()

    def _take(self):
        """The next item, waiting for it (the wait is the loop's stall)."""
        if self._pending is not None:
            item, self._pending = self._pending, None
            return item
        if self._failed is not None:
            raise self._failed
        if self.done:
            return _END
        self._start()
        t = time.perf_counter()
        item = self._queue.get()
        with self._lock:
            self._wait_s += time.perf_counter() - t
        if isinstance(item, _Failure):
            self._failed = item.exc
            raise item.exc
        if item is _END:
            self.done = True
        return item

    def _taken(self, item):
        """The loop took item: the state moves past it."""
        with self._lock:
            self._steps += 1
        self._position = item.position
        self._job = item.job
        if item.reader is not None:
            self._reader = item.reader
        if item.last_step:
            self.epoch, self.step = item.epoch + 1, 0
            if item.failed:
                self.failed_samples[item.epoch] = item.failed
                warnings.warn(f"sluice: epoch {item.epoch} of job {item.job} lacks {item.failed} samples that could not "
                              "be preprocessed or whose shard failed (the agent's /v1/stats lists them)", stacklevel=3)
        else:
            self.epoch, self.step = item.epoch, item.step + 1

    # -- the prefetch thread -------------------------------------------------

    def _start(self):
        if self._thread is None:
            self._queue = queue.Queue(maxsize=self.prefetch)
            self._thread = threading.Thread(target=self._run, name=f"sluice-loader-rank{self.rank}", daemon=True)
            self._thread.start()

    def _run(self):
        try:
            if self._resume is not None:
                self.resume_info = self._post_resume(self._resume)
            while not self._stop.is_set():
                item = self._get()
                self._put(item)
                if item is _END:
                    return
        except Exception as e:  # handed to the training loop
            if not self._stop.is_set():
                self._put(_Failure(e))
        finally:
            if self._conn is not None:
                self._conn.close()

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.5)
                return
            except queue.Full:
                pass

    def _connection(self):
        if self._conn is None:
            if self._unix is not None:
                self._conn = UnixConnection(self._unix, timeout=self.timeout)
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        conn = self._conn
        if conn.sock is not None and _peer_closed(conn.sock):
            conn.close()  # the agent's idle timeout passed (a long step): open another
        if conn.sock is None:
            # A refused connection sent nothing: retry while the agent starts.
            deadline = time.monotonic() + self.connect_timeout
            while True:
                try:
                    conn.connect()
                    break
                except (ConnectionRefusedError, FileNotFoundError) as e:  # a socket file not made yet, too
                    if time.monotonic() >= deadline or self._stop.is_set():
                        raise AgentError(f"agent {self.url} unreachable: {e}") from None
                    time.sleep(0.2)
                except OSError as e:
                    raise AgentError(f"agent {self.url} unreachable: {e}") from None
        return conn

    def _request(self, method, path, body=None, headers=None):
        """Sends one request; returns the response (the body not read).
        Every failure after the request left is an AgentError: it may have
        been served, so it is not retried."""
        conn = self._connection()
        try:
            conn.request(method, self._base + path, body=body, headers={**(headers or {}), **self._auth})
            return conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise AgentError(f"agent {self.url}: {method} {path.split('?')[0]}: {type(e).__name__}: {e}") from None

    def _post_resume(self, state):
        params = {"world_size": self.world_size, "rank": self.rank}
        if self.generation:
            params["generation"] = self.generation
        q = urllib.parse.urlencode(params)
        body = json.dumps(state).encode()
        resp = self._request("POST", "/v1/resume?" + q, body, {"Content-Type": "application/json"})
        data = self._read_small(resp)
        if resp.status == 410:
            raise JobEnded(_text(data) or f"job ended ({resp.reason})")
        if resp.status != 200:
            raise AgentError(f"agent {self.url}: resume refused: {resp.status} {resp.reason}: {_text(data)}{self._auth_hint(resp)}",
                             resp.status)
        try:
            return json.loads(data)
        except ValueError:
            raise CorruptBatch(f"agent {self.url}: resume answer is not JSON: {_text(data)}") from None

    def _auth_hint(self, resp):
        """What a 401 means for this loader's configuration."""
        if resp.status != 401:
            return ""
        if not self._auth:
            return f" (this loader sent no token: set {TOKEN_FILE_ENV} or {TOKEN_ENV}, or pass token_file= or token=)"
        return " (this loader's token is not the agent's)"

    def _read_small(self, resp):
        try:
            return resp.read()
        except (OSError, http.client.HTTPException) as e:
            self._conn.close()
            raise AgentError(f"agent {self.url}: reading a {resp.status} answer: {e}") from None

    def _get(self):
        with self._lock:
            steps, wait_s, compute_s = self._steps, self._wait_s, self._compute_s
        params = {"rank": self.rank, "world_size": self.world_size, "steps": steps,
                  "wait_s": f"{wait_s:.6f}", "compute_s": f"{compute_s:.6f}"}
        if self.drop_last:
            params["drop_last"] = 1
        resp = self._request("GET", "/v1/batch?" + urllib.parse.urlencode(params))
        if resp.status != 200:
            body = _text(self._read_small(resp))
            end = resp.getheader("Sluice-End", "")
            if resp.status == 410 and end != "ended":
                return _END
            if resp.status == 410:
                raise JobEnded(body or f"job ended ({resp.reason})")
            raise AgentError(f"agent {self.url}: GET /v1/batch: {resp.status} {resp.reason}: {body}{self._auth_hint(resp)}",
                             resp.status)
        buf = self._read_body(resp)
        return self._decode(buf)

    def _read_body(self, resp):
        """The body in one buffer of its size, read into in place."""
        if getattr(resp, "mapped", None) is not None:
            return resp.mapped  # the agent's memfd, mapped: nothing to copy
        n = resp.length
        try:
            if n is None:  # not sent with a length: read it whole
                return bytearray(resp.read())
            mv = memoryview(self._buffer(n))[:n]
            got = 0
            while got < n:
                k = resp.readinto(mv[got:])
                if not k:
                    raise AgentError(f"agent {self.url}: connection closed after {got} of {n} bytes of a batch")
                got += k
            return mv
        except (OSError, http.client.HTTPException) as e:
            self._conn.close()
            raise AgentError(f"agent {self.url}: reading a batch: {type(e).__name__}: {e}") from None

    def _buffer(self, n):
        """A buffer of at least n bytes: a pooled one that no batch views
        any more (its arrays, and tensors made from them, hold references
        to it), else a new one. Reuse saves the page faults and zeroing of
        a fresh multi-MB allocation, about a sixth of the client's time."""
        free = None
        for buf in self._pool:
            # References: the pool's, this loop's and getrefcount's own.
            if n <= len(buf) <= 2 * n and sys.getrefcount(buf) == 3:
                free = buf
                break
        if free is not None:
            return free
        buf = bytearray(n)
        if len(self._pool) < self.prefetch + 4:
            self._pool.append(buf)
        else:  # the batches held are more than expected, or sizes changed
            self._pool[len(self._pool) - 1] = buf
        return buf

    def _decode(self, buf):
        tensors, meta = parse(buf)
        what = "batch"
        try:
            job = meta["job"]
            epoch = int(meta["epoch"])
            keys = json.loads(meta["keys"])
        except KeyError as e:
            raise CorruptBatch(f"{what}: metadata has no {e.args[0]!r} (has {sorted(meta)})") from None
        except ValueError as e:
            raise CorruptBatch(f"{what}: metadata epoch or keys unreadable: {e}") from None
        except RecursionError:
            raise CorruptBatch(f"{what}: metadata epoch or keys unreadable: nested deeper than the recursion limit") from None
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise CorruptBatch(f"{what}: metadata keys is not a JSON array of strings")
        for name, a in tensors.items():
            if a.ndim == 0 or a.shape[0] != len(keys):
                raise CorruptBatch(f"{what}: tensor {name!r} has shape {list(a.shape)}, want {len(keys)} rows (one per key)")
        for k, want in (("rank", self.rank), ("world_size", self.world_size)):
            if k in meta and meta[k] != str(want):
                raise CorruptBatch(f"{what}: for {k} {meta[k]}, but this loader is {k} {want}")
        if "step" in meta:
            try:
                step = int(meta["step"])
            except ValueError:
                raise CorruptBatch(f"{what}: metadata step {meta['step']!r} is not an integer") from None
        else:  # an agent that sends no step: count them here
            step = self._counted[1] + 1 if self._counted[0] == epoch else 0
        self._counted = (epoch, step)
        position = None
        if "position" in meta:
            try:
                position = json.loads(meta["position"])
            except ValueError as e:
                raise CorruptBatch(f"{what}: metadata position is not JSON: {e}") from None
            except RecursionError:
                raise CorruptBatch(f"{what}: metadata position is not JSON: nested deeper than the recursion limit") from None
        failed = 0
        if "epoch_failed" in meta:
            v = meta["epoch_failed"]
            if not v.isdigit() or len(v) > 18:
                raise CorruptBatch(f"{what}: metadata epoch_failed {_text(v.encode(), 40)!r} is not a count")
            failed = int(v)
        batch = dict(tensors)
        batch[KEY], batch[EPOCH], batch[STEP] = keys, epoch, step
        if "sources" in meta:
            try:
                sources = json.loads(meta["sources"])
            except (ValueError, RecursionError):
                raise CorruptBatch(f"{what}: metadata sources is not JSON") from None
            if not isinstance(sources, list) or len(sources) != len(keys) or not all(type(s) is int for s in sources):
                raise CorruptBatch(f"{what}: metadata sources is not a JSON array of one source index per key")
            batch[SOURCE] = sources
        item = _Item(batch, epoch, step, meta.get("last_step") == "true", position, job, meta.get("reader"), failed)
        if self._convert is not None:
            item.batch = self._convert(batch)
        return item


def _agent_address(url):
    """(unix socket path or None, host, port, base path) of an agent URL:
    http://HOST:PORT[/r/READER], or its Unix socket as unix:PATH or
    http+unix://PATH-PERCENT-ENCODED[/r/READER] (requests-unixsocket's
    form, which has room for a reader's path)."""
    u = urllib.parse.urlsplit(url)
    if u.scheme == "unix" and u.path and not u.netloc:
        return u.path, None, None, ""
    if u.scheme == "http+unix" and u.netloc:
        return urllib.parse.unquote(u.netloc), None, None, u.path.rstrip("/")
    if u.scheme != "http" or not u.hostname:
        raise ValueError(f"url {url!r}: want http://HOST:PORT, unix:PATH or http+unix://PATH-PERCENT-ENCODED")
    return None, u.hostname, u.port or 80, u.path.rstrip("/")


def _text(data, limit=2000):
    s = data.decode("utf-8", "replace").strip()
    return s if len(s) <= limit else s[:limit] + "..."

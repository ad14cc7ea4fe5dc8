"""The agent's Unix socket (`sluice agent --listen-unix PATH`,
wire/agentsocket.go): the agent's HTTP API, each request in a frame, each
batch's body a sealed memfd the loader maps instead of reading it through
a socket. The training process then copies nothing: it pays a mapping and
the page faults of what it touches.

Frames: a 4-byte big-endian length, then the bytes. A request is one
HTTP/1.1 request; an answer is a JSON head (status, header, length, fd,
buffer) followed by the body, or by nothing when the body is in a memfd:
the file passed with the frame's first bytes (SCM_RIGHTS, fd true), or the
connection's buffer of that number, passed before. The connection keeps
its buffers mapped (their pages stay faulted in) and, once no batch views
one any more, releases it in its next request's Sluice-Release header: the
agent writes into a buffer only after that.
"""

import array
import fcntl
import http
import http.client
import json
import mmap
import os
import socket
import struct
import sys

MAX_REQUEST = 8 << 20   # wire.AgentSocketMaxRequest
MAX_HEAD = 1 << 20      # wire.AgentSocketMaxHead
MAX_INLINE = 64 << 20   # wire.AgentSocketMaxInline
MAX_BUFFERS = 8         # wire.AgentSocketMaxBuffers
RELEASE = "Sluice-Release"  # wire.AgentSocketHeaderRelease
_RESIZE = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


class UnixResponse:
    """What the loader reads of http.client.HTTPResponse: status, reason,
    length, getheader, read, readinto; mapped is the body when the agent
    passed it as a memfd (a writable copy-on-write view: writes stay in
    this process)."""

    def __init__(self, status, header, body, mapped):
        self.status = status
        try:
            self.reason = http.HTTPStatus(status).phrase
        except ValueError:
            self.reason = ""
        self._header = {k.lower(): v for k, v in header.items()}
        self._body = body
        self.mapped = mapped
        self.length = len(mapped) if mapped is not None else len(body)
        self._off = 0

    def getheader(self, name, default=None):
        v = self._header.get(name.lower())
        return ", ".join(v) if v else default

    def _data(self):
        return self.mapped if self.mapped is not None else self._body

    def read(self):
        d = self._data()[self._off:]
        self._off = self.length
        return bytes(d)

    def readinto(self, b):
        d = self._data()
        n = min(len(b), self.length - self._off)
        b[:n] = d[self._off:self._off + n]
        self._off += n
        return n


class UnixConnection:
    """What the loader uses of http.client.HTTPConnection (sock, connect,
    request, getresponse, close), over the agent's Unix socket."""

    def __init__(self, path, timeout=None):
        self.path, self.timeout = path, timeout
        self.sock = None
        self._bufs = {}  # buffer number -> its mmap, on this connection
        self._lent = set()  # those an answer came in, not yet released

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except BaseException:
            s.close()
            raise
        self.sock = s

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        # The buffers were this connection's: batches that view one keep
        # its mapping alive, and nothing writes into it any more.
        self._bufs, self._lent = {}, set()

    def _released(self):
        """The lent buffers no batch views any more (references: the
        dict's and getrefcount's own), taken back from the lent."""
        free = sorted(n for n in self._lent if sys.getrefcount(self._bufs[n]) == 2)
        self._lent.difference_update(free)
        return free

    def request(self, method, path, body=None, headers=None):
        body = body or b""
        lines = [f"{method} {path} HTTP/1.1", "Host: sluice-agent"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if self.sock is not None and self._lent:
            free = self._released()
            if free:
                lines.append(f"{RELEASE}: {','.join(map(str, free))}")
        if body or method not in ("GET", "HEAD"):
            lines.append(f"Content-Length: {len(body)}")
        head = "\r\n".join(lines)
        if "\0" in head or any("\r" in l or "\n" in l for l in lines):
            raise ValueError("request line or header with a line break or NUL")
        req = (head + "\r\n\r\n").encode("latin-1") + body
        if len(req) > MAX_REQUEST:
            raise ValueError(f"request of {len(req)} bytes: the agent's socket takes at most {MAX_REQUEST}")
        if self.sock is None:
            self.connect()
        self.sock.sendall(struct.pack(">I", len(req)) + req)

    def getresponse(self):
        fds = []
        try:
            n = struct.unpack(">I", _recv_exact(self.sock, 4, fds))[0]
            if n == 0 or n > MAX_HEAD:
                raise http.client.HTTPException(f"agent socket: answer head of {n} bytes, want 1 to {MAX_HEAD}")
            try:
                head = json.loads(_recv_exact(self.sock, n, fds))
                status, header, length = int(head["status"]), head.get("header") or {}, int(head["length"])
                fd, buf = bool(head.get("fd")), int(head.get("buffer") or 0)
                if not isinstance(header, dict) or not all(isinstance(v, list) for v in header.values()):
                    raise ValueError("header is not an object of lists")
            except (ValueError, KeyError, TypeError) as e:
                raise http.client.HTTPException(f"agent socket: answer head unreadable: {e}") from None
            if buf and fd:
                if len(fds) != 1:
                    raise http.client.HTTPException(f"agent socket: {len(fds)} files passed with buffer {buf}, want 1")
                if buf in self._bufs or len(self._bufs) >= MAX_BUFFERS:
                    raise http.client.HTTPException(f"agent socket: buffer {buf} passed again, or over {MAX_BUFFERS} buffers")
                self._bufs[buf] = _map(fds.pop(), length, shared=True)
            if buf:
                mm = self._bufs.get(buf)
                if mm is None or buf in self._lent or not 0 < length <= len(mm) or fds:
                    raise http.client.HTTPException(f"agent socket: an answer of {length} bytes in buffer {buf}, which this "
                                                    "connection does not hold free, or with files passed")
                self._lent.add(buf)
                return UnixResponse(status, header, b"", memoryview(mm)[:length])
            if not fd:
                if not 0 <= length <= MAX_INLINE:
                    raise http.client.HTTPException(f"agent socket: inline body of {length} bytes, want at most {MAX_INLINE}")
                body = _recv_exact(self.sock, length, fds) if length else b""
                if fds:
                    raise http.client.HTTPException(f"agent socket: {len(fds)} files passed with an inline answer")
                return UnixResponse(status, header, body, None)
            if len(fds) != 1:
                raise http.client.HTTPException(f"agent socket: {len(fds)} files passed with a memfd answer, want 1")
            return UnixResponse(status, header, b"", memoryview(_map(fds.pop(), length, shared=False))[:length])
        finally:
            for f in fds:
                os.close(f)


def _recv_exact(sock, n, fds):
    """n bytes of sock, the files passed with them appended to fds."""
    buf = bytearray(n)
    mv = memoryview(buf)
    got = 0
    while got < n:
        want = n - got
        data, new, flags, _ = socket.recv_fds(sock, min(want, 1 << 20), 4)
        fds.extend(new)
        if flags & socket.MSG_CTRUNC:
            raise http.client.HTTPException("agent socket: more files passed than an answer has")
        if not data:
            raise ConnectionError(f"agent closed its socket after {got} of {n} bytes")
        mv[got:got + len(data)] = data
        got += len(data)
    return buf


def _map(fd, length, shared):
    """A mapping of the memfd fd, of at least length bytes; closes fd.
    Its seals are checked first: a file that could shrink under the
    mapping would fault (SIGBUS) where the loop touches it. A buffer of
    the connection's is mapped shared (the agent's next writes show in
    it); a memfd of one answer's own is sealed against writes and mapped
    copy-on-write (writes stay in this process)."""
    want = _RESIZE if shared else _RESIZE | fcntl.F_SEAL_WRITE
    try:
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError as e:
            raise http.client.HTTPException(f"agent socket: the body's file is no sealed memfd: {e.strerror}") from None
        if seals & want != want:
            raise http.client.HTTPException(f"agent socket: the body's memfd lacks seals {want:#x} (has {seals:#x})")
        size = os.fstat(fd).st_size
        if not 0 < length <= size:
            raise http.client.HTTPException(f"agent socket: body of {length} bytes in a memfd of {size}")
        if shared:
            return mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        return mmap.mmap(fd, length, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)

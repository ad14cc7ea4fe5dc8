"""The client side of the agent's Unix socket (sluice/unixsock.py) against
a scripted server written here: answers inline, in a memfd of their own,
in the connection's buffers (reused once released), and the files and
heads a client must refuse. The real agent is on the other side in
test/integration (TestIntegrationPythonLoaderMapsTheAgentsBatches)."""

import fcntl
import http.client
import json
import os
import socket
import struct
import tempfile
import threading
import unittest

from sluice.unixsock import RELEASE, UnixConnection

SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


def memfd(data, seals, size=None):
    fd = os.memfd_create("test", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size or len(data))
    os.pwrite(fd, data, 0)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


class Scripted:
    """Serves one connection: for each request, the next of answers, a
    function of the request's bytes returning (head, inline body, fds)."""

    def __init__(self, answers):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "s.sock")
        self.ln = socket.socket(socket.AF_UNIX)
        self.ln.bind(self.path)
        self.ln.listen(1)
        self.requests = []
        self.answers = list(answers)
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        c, _ = self.ln.accept()
        with c:
            for answer in self.answers:
                n = struct.unpack(">I", c.recv(4, socket.MSG_WAITALL))[0]
                req = c.recv(n, socket.MSG_WAITALL)
                self.requests.append(req.decode("latin-1"))
                head, body, fds = answer(req)
                js = json.dumps(head).encode()
                frame = struct.pack(">I", len(js)) + js + body
                socket.send_fds(c, [frame[:4]], fds) if fds else c.sendall(frame[:4])
                c.sendall(frame[4:])
                for f in fds:
                    os.close(f)

    def close(self):
        self.ln.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


def get(conn, path="/v1/batch"):
    conn.request("GET", path, headers={"Authorization": "Bearer t"})
    return conn.getresponse()


class UnixSocketTest(unittest.TestCase):
    def serve(self, *answers):
        s = Scripted(answers)
        self.addCleanup(s.close)
        conn = UnixConnection(s.path, timeout=10)
        self.addCleanup(conn.close)
        return s, conn

    def test_inline_and_memfd_answers(self):
        s, conn = self.serve(
            lambda req: ({"status": 404, "header": {"Sluice-End": ["x"]}, "length": 4}, b"gone", []),
            lambda req: ({"status": 200, "length": 5, "fd": True}, b"", [memfd(b"hello", SEALS | fcntl.F_SEAL_WRITE)]))
        r = get(conn)
        self.assertEqual((r.status, r.reason, r.getheader("sluice-end"), r.read()), (404, "Not Found", "x", b"gone"))
        r = get(conn)
        self.assertEqual(bytes(r.mapped), b"hello")
        r.mapped[0] = ord("j")  # copy-on-write: the process's own
        self.assertEqual(bytes(r.mapped), b"jello")
        self.assertIn("Authorization: Bearer t", s.requests[0])

    def test_buffers_are_kept_and_released_once_no_batch_views_them(self):
        s, conn = self.serve(
            lambda req: ({"status": 200, "length": 3, "fd": True, "buffer": 1}, b"", [memfd(b"abcdef", SEALS)]),
            lambda req: ({"status": 200, "length": 4, "fd": True, "buffer": 2}, b"", [memfd(b"wxyz", SEALS)]),
            lambda req: ({"status": 200, "length": 2, "buffer": 1}, b"", []))
        first = get(conn).mapped
        self.assertEqual(bytes(first), b"abc")
        second = get(conn).mapped
        self.assertNotIn(RELEASE, s.requests[1])  # the first is still viewed
        del first
        third = get(conn).mapped
        self.assertIn(f"{RELEASE}: 1\r\n", s.requests[2])
        self.assertEqual((bytes(second), bytes(third)), (b"wxyz", b"ab"))

    def test_refused_files_and_heads(self):
        cases = [
            ("lacks seals", lambda req: ({"status": 200, "length": 5, "fd": True}, b"", [memfd(b"hello", SEALS)])),
            ("lacks seals", lambda req: ({"status": 200, "length": 5, "fd": True, "buffer": 1}, b"", [memfd(b"hello", 0)])),
            ("body of 9 bytes in a memfd of 5", lambda req: ({"status": 200, "length": 9, "fd": True, "buffer": 1}, b"",
                                                             [memfd(b"hello", SEALS)])),
            ("does not hold free", lambda req: ({"status": 200, "length": 5, "buffer": 3}, b"", [])),
            ("1 files passed with an inline answer", lambda req: ({"status": 200, "length": 0}, b"", [memfd(b"x", SEALS)])),
            ("answer head unreadable", lambda req: ({"length": 0}, b"", [])),
        ]
        for says, answer in cases:
            with self.subTest(says):
                _, conn = self.serve(answer)
                with self.assertRaisesRegex(http.client.HTTPException, says):
                    get(conn)

    def test_a_header_with_a_line_break_is_refused(self):
        conn = UnixConnection("/nonexistent", timeout=1)
        with self.assertRaisesRegex(ValueError, "line break"):
            conn.request("GET", "/v1/batch", headers={"X": "a\r\nInjected: 1"})


if __name__ == "__main__":
    unittest.main()

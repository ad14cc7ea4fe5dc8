import os
import tempfile
import unittest
from unittest import mock

import sluice
from sluice.loader import TOKEN_ENV, TOKEN_FILE_ENV, load_token
from fakeagent import FakeAgent

TOKEN = "agent-token-0123456789abcdef"


def keys(a, b):
    return [f"{i:04d}" for i in range(a, b)]


class TokenTest(unittest.TestCase):
    def setUp(self):
        # No token from the environment this test runs in.
        patcher = mock.patch.dict(os.environ, {TOKEN_ENV: "", TOKEN_FILE_ENV: ""})
        patcher.start()
        self.addCleanup(patcher.stop)

    def agent(self, *a, **kw):
        ag = FakeAgent(*a, **kw)
        self.addCleanup(ag.close)
        return ag

    def loader(self, url, **kw):
        ld = sluice.Loader(url, timeout=10, connect_timeout=1, **kw)
        self.addCleanup(ld.close)
        return ld

    def token_file(self, content):
        fd, path = tempfile.mkstemp()
        with os.fdopen(fd, "w") as f:
            f.write(content)
        self.addCleanup(os.remove, path)
        return path

    def test_every_request_carries_the_token(self):
        good = self.token_file(TOKEN + "\n")
        ways = [
            ("argument", {"token": TOKEN}, {}),
            ("token_file", {"token_file": good}, {}),
            (TOKEN_FILE_ENV, {}, {TOKEN_FILE_ENV: good}),
            (TOKEN_ENV, {}, {TOKEN_ENV: TOKEN}),
            ("the file over the value", {}, {TOKEN_FILE_ENV: good, TOKEN_ENV: "another-token-0123456789"}),
        ]
        for name, kw, env in ways:
            with self.subTest(name), mock.patch.dict(os.environ, env):
                ag = self.agent([[keys(0, 2), keys(2, 4)]], token=TOKEN)
                ld = self.loader(ag.url, **kw)
                ld.load_state_dict({"v": 1, "job": "j", "reader": "trainer", "epoch": 0, "step": 0, "world_size": 1, "position": None})
                self.assertEqual(len(list(ld)), 2)
                self.assertTrue(ag.auth)
                self.assertEqual(set(ag.auth), {"Bearer " + TOKEN})
                self.assertEqual([r[0] for r in ag.requests][:1], ["POST"])

    def test_without_the_token_a_401_says_how_to_give_it(self):
        ag = self.agent([[keys(0, 2)]], token=TOKEN)
        with self.assertRaises(sluice.AgentError) as cm:
            list(self.loader(ag.url))
        self.assertEqual(cm.exception.status, 401)
        self.assertIn("sent no token", str(cm.exception))
        self.assertIn(TOKEN_ENV, str(cm.exception))
        self.assertEqual(ag.requests, [])  # nothing let in

        with self.assertRaises(sluice.AgentError) as cm:
            list(self.loader(ag.url, token="not-the-token-0123456789"))
        self.assertEqual(cm.exception.status, 401)
        self.assertIn("token is not the agent's", str(cm.exception))

        ld = self.loader(ag.url)
        ld.load_state_dict({"v": 1, "job": "j", "reader": "trainer", "epoch": 0, "step": 0, "world_size": 7, "position": None})
        with self.assertRaisesRegex(sluice.AgentError, "resume refused: 401"):
            list(ld)
        self.assertEqual(ag.requests, [])

    def test_bad_tokens_are_named_not_shown(self):
        empty = self.token_file("\n")
        cases = [
            ({"token": "short"}, "the token argument: 5 bytes, want at least 16"),
            ({"token": TOKEN + "\r\nX-Evil: 1"}, "want letters, digits"),
            ({"token_file": empty}, "token_file " + empty + ": empty"),
            ({"token_file": "/nonexistent/token"}, "token_file /nonexistent/token: No such file"),
        ]
        for kw, want in cases:
            with self.subTest(want), self.assertRaises(ValueError) as cm:
                sluice.Loader("http://127.0.0.1:1", **kw)
            self.assertIn(want, str(cm.exception))
            self.assertNotIn(TOKEN, str(cm.exception))
        with mock.patch.dict(os.environ, {TOKEN_ENV: "tooshort"}), self.assertRaises(ValueError) as cm:
            sluice.Loader("http://127.0.0.1:1")
        self.assertIn(TOKEN_ENV + ": 8 bytes", str(cm.exception))
        self.assertNotIn("tooshort", str(cm.exception))
        self.assertIsNone(load_token(environ={}))

    def test_the_token_does_not_print(self):
        ld = self.loader("http://127.0.0.1:1", token=TOKEN)
        self.assertNotIn(TOKEN, repr(ld))
        self.assertNotIn(TOKEN, str(ld.state_dict()))

    def test_a_connection_the_agent_closed_while_idle_is_replaced(self):
        # The agent closes a kept-alive connection once its idle timeout
        # passed (a long training step, an evaluation): the next request
        # goes over a new one instead of failing.
        ag = self.agent([[keys(0, 1), keys(1, 2), keys(2, 3)]], close_idle=True)
        ld = self.loader(ag.url)
        self.addCleanup(lambda: ld._conn.close())
        first = ld._get()
        ag.closed.get(timeout=10)  # the agent closed the connection
        second = ld._get()
        self.assertEqual((first.step, second.step), (0, 1))
        self.assertEqual(len(ag.requests), 2)


if __name__ == "__main__":
    unittest.main()

"""The fresh-prompt protocol's rules and the prompt generator (no server needed).

    python3 -m unittest discover bench/tests
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fresh_prompt  # noqa: E402
import promptgen  # noqa: E402


def rec(rid, reused=0, stop="length", prompt=1000):
    return {"request_id": rid, "prompt_tokens": prompt, "reused_tokens": reused, "prefill_ms": 100.0,
            "prefill_tokens_per_s": 10000.0, "generated_tokens": 128, "decode_ms": 1000.0,
            "decode_tokens_per_s": 127.0, "wall_ms": 1100.0, "queue_ms": 0.0, "stop_reason": stop,
            "prefill_device": "cpu", "decode_device": "cpu"}


def line(r):
    return json.dumps({"timing": r})


REQUESTS = [
    {"label": "fresh-1", "kind": "fresh", "fresh": True, "id": "chatcmpl-a"},
    {"label": "fresh-1/follow-up", "kind": "follow-up", "fresh": False, "id": "chatcmpl-b"},
    {"label": "fresh-2", "kind": "fresh", "fresh": True, "id": "chatcmpl-c"},
]


class Rules(unittest.TestCase):
    def check(self, lines):
        return fresh_prompt.match_records(REQUESTS, fresh_prompt.parse_timing_lines(lines))

    def test_complete_log_passes(self):
        got = self.check([line(rec("chatcmpl-a")), line(rec("chatcmpl-b", reused=990)), line(rec("chatcmpl-c"))])
        self.assertEqual([q["timing"]["request_id"] for q in got], ["chatcmpl-a", "chatcmpl-b", "chatcmpl-c"])
        self.assertEqual(fresh_prompt.summarize(dict(got[1], functions=1))["reused_tokens"], 990)

    def test_missing_record_fails_naming_the_request(self):
        with self.assertRaises(fresh_prompt.ProtocolError) as e:
            self.check([line(rec("chatcmpl-a")), line(rec("chatcmpl-c"))])
        self.assertIn("fresh-1/follow-up", str(e.exception))
        self.assertIn("chatcmpl-b", str(e.exception))
        self.assertIn("no completed timing record", str(e.exception))

    def test_duplicated_record_fails_naming_the_request(self):
        with self.assertRaises(fresh_prompt.ProtocolError) as e:
            self.check([line(rec("chatcmpl-a")), line(rec("chatcmpl-b")), line(rec("chatcmpl-c")), line(rec("chatcmpl-c"))])
        self.assertIn("fresh-2 (id chatcmpl-c)", str(e.exception))
        self.assertIn("2 timing records", str(e.exception))
        self.assertNotIn("fresh-1", str(e.exception))

    def test_fresh_prompt_with_reused_tokens_fails_naming_the_request(self):
        with self.assertRaises(fresh_prompt.ProtocolError) as e:
            self.check([line(rec("chatcmpl-a", reused=16)), line(rec("chatcmpl-b", reused=900)), line(rec("chatcmpl-c"))])
        self.assertIn("fresh-1 (id chatcmpl-a)", str(e.exception))
        self.assertIn("reused 16 KV tokens", str(e.exception))

    def test_cancelled_records_never_count(self):
        with self.assertRaises(fresh_prompt.ProtocolError) as e:
            self.check([line(rec("chatcmpl-a", stop="cancelled")), line(rec("chatcmpl-b")), line(rec("chatcmpl-c"))])
        self.assertIn("fresh-1 (id chatcmpl-a): no completed", str(e.exception))
        # a cancelled attempt next to a completed one is still exactly one completed record
        self.check([line(rec("chatcmpl-a", stop="cancelled")), line(rec("chatcmpl-a")), line(rec("chatcmpl-b")), line(rec("chatcmpl-c"))])

    def test_other_requests_and_other_lines_are_ignored(self):
        lines = ["2026-11-30T01:00:00Z INFO strata_rt: listening", line(rec("someone-else")), "not json {",
                 "prefix text " + line(rec("chatcmpl-a")), line(rec("chatcmpl-b")), line(rec("chatcmpl-c"))]
        self.assertEqual(len(self.check(lines)), 3)

    def test_every_violation_is_reported(self):
        with self.assertRaises(fresh_prompt.ProtocolError) as e:
            self.check([line(rec("chatcmpl-a", reused=32))])
        msg = str(e.exception)
        for name in ("fresh-1 (id", "fresh-1/follow-up", "fresh-2"):
            self.assertIn(name, msg)


class Generator(unittest.TestCase):
    def test_same_seed_same_bytes(self):
        for n in (1, 140, 280):
            self.assertEqual(promptgen.source(n, 42, 3).encode(), promptgen.source(n, 42, 3).encode())
        self.assertEqual(promptgen.chat_messages(140, 42, 1), promptgen.chat_messages(140, 42, 1))

    def test_known_bytes(self):
        # Pins the generator: a change here changes every recorded benchmark's prompts.
        import hashlib
        self.assertEqual(hashlib.sha256(promptgen.source(140, 42, 1).encode()).hexdigest()[:16], PINNED_140_42_1)

    def test_different_seed_different_bytes(self):
        self.assertNotEqual(promptgen.source(140, 42, 1), promptgen.source(140, 43, 1))
        self.assertNotEqual(promptgen.source(140, 42, 1).split("\n", 1)[1], promptgen.source(140, 43, 1).split("\n", 1)[1])

    def test_every_prompt_starts_differently(self):
        heads = {promptgen.chat_messages(140, 42, i)[0]["content"] for i in range(5)}
        self.assertEqual(len(heads), 5)
        self.assertNotEqual(promptgen.header(42, 1, ""), promptgen.header(42, 1, "again"))

    def test_size_grows_with_functions(self):
        a, b = len(promptgen.source(140, 42, 1)), len(promptgen.source(280, 42, 2))
        self.assertGreater(b, 1.9 * a)

    def test_follow_up_extends_the_conversation(self):
        m = promptgen.chat_messages(10, 42, 1)
        f = promptgen.follow_up(m, "It adds numbers.")
        self.assertEqual(f[:len(m)], m)
        self.assertEqual([x["role"] for x in f[len(m):]], ["assistant", "user"])


PINNED_140_42_1 = "6721998d86fafa61"

if __name__ == "__main__":
    unittest.main()

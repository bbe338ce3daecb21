"""Load test on loopback: DSV4_LOAD_CLIENTS (64) concurrent streaming clients with mixed prompt and output lengths,
some disconnecting mid-stream, some sharing a prefix (a common system message, a common token prefix). Every
request that stays connected completes with exactly its max_tokens (ignore_eos), nothing lost or duplicated (each
greedy stream equals the same request run alone on a server without prefix cache, token by token where logprobs are
asked), the disconnected ones are cancelled, and at the end nothing runs or waits and no sequence is held but the
prefix cache's. CI-sized on the CPU backend (short prompts and outputs); run_tests.py --load-clients N for more."""

import os
import random
import threading
import time
import unittest

import harness

CLIENTS = int(os.environ.get("DSV4_LOAD_CLIENTS", "64"))
SYSTEM = "You are the load test's assistant. Answer in one short line, please. "
SHARED_PREFIX = harness.byte_token_ids("Shared prefix of several requests: the quick brown fox jumps over ")


def make_requests(n, seed=20240521):
    """[(kind, path, body, close_after)] with a fixed mix: 1 in 8 disconnects after a few chunks, 2 in 8 are chats
    under one system message, 2 in 8 completions after a shared token prefix, the rest random token prompts."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        slot = i % 8
        max_tokens = rng.randint(1, 12)
        if slot == 0:
            ids = [rng.randrange(2, 258) for _ in range(rng.randint(4, 40))]
            body = {"prompt": ids, "max_tokens": 400}
            out.append(("disconnect", "/v1/completions", body, rng.randint(1, 4)))
            continue
        if slot in (1, 2):
            body = {"messages": [{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": f"Question {i}: " + "why? " * rng.randint(0, 4)}],
                    "max_tokens": max_tokens}
            out.append(("chat", "/v1/chat/completions", body, None))
            continue
        if slot in (3, 4):
            ids = SHARED_PREFIX + [rng.randrange(2, 258) for _ in range(rng.randint(1, 16))]
        else:
            ids = [0] + [rng.randrange(2, 258) for _ in range(rng.randint(1, 64))]
        body = {"prompt": ids, "max_tokens": max_tokens}
        if i % 2 == 0:
            body["logprobs"] = 1
        out.append(("completion", "/v1/completions", body, None))
    for _, _, body, _ in out:
        body.update(temperature=0, ignore_eos=True, stream=True, stream_options={"include_usage": True})
    return out


def stream_tokens(result):
    """The tokens listed by a completion stream's logprobs."""
    return [t for ch in result.chunks for c in ch.get("choices", []) for t in ((c.get("logprobs") or {}).get("tokens")
                                                                              or [])]


class LoadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.Server("--max-running", 16, "--step-tokens", 64, "--prefix-cache", 8,
                                    "--prefix-snapshot", 32).start()
        cls.alone = harness.Server("--max-running", 1, "--prefix-cache", 0).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.alone.stop()

    def test_concurrent_streams(self):
        requests = make_requests(CLIENTS)
        before = self.server.metrics()
        results = [None] * len(requests)
        errors = []
        barrier = threading.Barrier(len(requests))

        def client(i):
            kind, path, body, close_after = requests[i]
            try:
                barrier.wait(60)
                results[i] = self.server.stream(path, body, close_after=close_after, timeout=600)
            except Exception as e:  # reported below with the request's index
                errors.append((i, repr(e)))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
        elapsed = time.monotonic() - start
        self.assertEqual(errors, [])
        self.assertFalse(any(t.is_alive() for t in threads), "a client never finished")

        ids, disconnected_early, completed, generated = set(), 0, 0, 0
        for i, ((kind, path, body, close_after), r) in enumerate(zip(requests, results)):
            with self.subTest(i=i, kind=kind):
                self.assertEqual(r.status, 200, r.error)
                self.assertTrue(r.content_type.startswith("text/event-stream"), r.content_type)
                chunk_ids = {ch["id"] for ch in r.chunks}
                self.assertEqual(len(chunk_ids), 1, "one id per stream")
                self.assertTrue(chunk_ids.isdisjoint(ids), "response ids are unique")
                ids |= chunk_ids
                if kind == "disconnect":
                    self.assertTrue(r.closed_early)
                    disconnected_early += not r.finish_reasons()
                    continue
                self.assertTrue(r.done, "the stream ends with [DONE]")
                self.assertEqual(r.after_done, b"", "nothing after [DONE]")
                self.assertEqual(r.finish_reasons(), ["length"])
                usage = r.usage()
                self.assertIsNotNone(usage, "include_usage: a usage chunk")
                self.assertEqual(usage["completion_tokens"], body["max_tokens"])
                if kind == "completion":
                    self.assertEqual(usage["prompt_tokens"], len(body["prompt"]))
                if body.get("logprobs"):
                    self.assertEqual(len(stream_tokens(r)), body["max_tokens"], "one token per step, none twice")
                completed += 1
                generated += usage["completion_tokens"]
        print(f"\nload: {len(requests)} streams ({completed} completed, {disconnected_early} disconnected) in "
              f"{elapsed:.1f} s, {generated / elapsed:.1f} output tokens/s", flush=True)

        # Nothing left behind: the counters settle with no request running or waiting and every request counted by
        # how it ended (a disconnected client's handler may count its request after the engine let it go).
        reasons = [f'dsv4_requests_total{{finish_reason="{r}"}}' for r in ("stop", "length", "tool_calls", "cancelled",
                                                                           "error")]

        def settled():
            m = self.server.metrics()
            counted = sum(m[key] - before[key] for key in reasons)
            idle = m["dsv4_requests_running"] == 0 and m["dsv4_requests_waiting"] == 0
            return m if idle and counted == len(requests) else None

        after = harness.wait_for(settled, timeout=30)
        self.assertIsNotNone(after, f"requests still running, waiting or uncounted 30 s after the clients ended:\n"
                                    f"{self.server.metrics().text}")
        self.assertEqual(after["dsv4_sequences_in_use"], after["dsv4_prefix_cache_entries"],
                         "no sequence held but the prefix cache's")
        if harness.BACKEND == "cpu":
            self.assertEqual(after["dsv4_state_pool_pages_used"], 0)

        def delta(key):
            return after[key] - before[key]

        self.assertGreaterEqual(delta('dsv4_requests_total{finish_reason="cancelled"}'), disconnected_early)
        self.assertEqual(delta('dsv4_requests_total{finish_reason="length"}'),
                         completed + (sum(kind == "disconnect" for kind, *_ in requests) - disconnected_early))
        self.assertGreaterEqual(delta("dsv4_generation_tokens_total"), generated)
        self.assertEqual(delta("dsv4_requests_total{finish_reason=\"error\"}"), 0)

        # Each greedy stream equals the same request alone (one at a time, no prefix cache), token by token.
        for i, ((kind, path, body, _), r) in enumerate(zip(requests, results)):
            if kind == "disconnect":
                continue
            with self.subTest(i=i, kind=kind, alone=True):
                plain = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
                alone = (self.alone.chat if kind == "chat" else self.alone.completion)(plain)
                choice = alone["choices"][0]
                if kind == "chat":
                    self.assertEqual(r.delta("content"), choice["message"].get("content") or "")
                    self.assertEqual(r.delta("reasoning_content"), choice["message"].get("reasoning_content") or "")
                else:
                    self.assertEqual(r.text(), choice["text"])
                    if body.get("logprobs"):
                        self.assertEqual(stream_tokens(r), choice["logprobs"]["tokens"])
                        streamed = [x for ch in r.chunks for c in ch.get("choices", [])
                                    for x in ((c.get("logprobs") or {}).get("token_logprobs") or [])]
                        self.assertEqual(streamed, choice["logprobs"]["token_logprobs"], "bitwise equal logprobs")
                self.assertEqual(alone["usage"]["completion_tokens"], body["max_tokens"])

        # The server still serves after the load.
        r = self.server.completion({"prompt": "After the load ", "max_tokens": 3, "temperature": 0})
        self.assertEqual(len(r["choices"]), 1)


if __name__ == "__main__":
    unittest.main()

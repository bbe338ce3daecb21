"""The server's life: /health 200 once ready; SIGTERM drains (the running stream finishes whole, new requests get
503 with an error object, the process exits 0); a client that disconnects mid-stream is cancelled at once and counted
(dsv4_requests_total{finish_reason="cancelled"}), its sequence freed."""

import json
import signal
import socket
import threading
import time
import unittest

import harness

CANCELLED = 'dsv4_requests_total{finish_reason="cancelled"}'


class LifecycleTest(unittest.TestCase):
    def test_sigterm_drains(self):
        server = harness.Server().start()
        try:
            n = 120
            body = {"prompt": "A long story: ", "max_tokens": n, "temperature": 0, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}}
            first_chunk = threading.Event()
            results = {}

            def run():
                conn = server.connection()
                conn.request("POST", "/v1/completions", body=json.dumps(body),
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                chunks, done = [], False
                for event in harness.iter_sse(resp):
                    if event == "[DONE]":
                        done = True
                        break
                    chunks.append(json.loads(event))
                    first_chunk.set()
                results.update(status=resp.status, chunks=chunks, done=done)
                conn.close()

            t = threading.Thread(target=run)
            t.start()
            self.assertTrue(first_chunk.wait(60), "the stream never started")
            server.proc.send_signal(signal.SIGTERM)
            # new work is refused while the stream runs
            deadline = time.monotonic() + 10
            while True:
                status, obj = server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})
                if status == 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            self.assertEqual(status, 503, obj)
            self.assertIsInstance(obj.get("error"), dict, obj)
            self.assertEqual(obj["error"].get("type"), "service_unavailable", obj)
            status, _ = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
            self.assertEqual(status, 503)
            t.join(60)
            self.assertFalse(t.is_alive())
            self.assertEqual(results["status"], 200)
            self.assertTrue(results["done"], "the running stream ends with [DONE]")
            usage = results["chunks"][-1]["usage"]
            self.assertEqual(usage["completion_tokens"], n, "the running request finished whole")
            self.assertEqual(results["chunks"][-2]["choices"][0]["finish_reason"], "length")
            rc = server.proc.wait(15)
            self.assertEqual(rc, 0, server.stderr())
        finally:
            server.kill()

    def test_disconnect_cancels_non_streaming(self):
        """A non-streaming client that goes away is cancelled too (nothing is written to it until the end, so the
        server has to notice the closed socket while it computes)."""
        server = harness.shared_server()
        before = server.metrics()
        body = json.dumps({"prompt": "Impatient: ", "max_tokens": 600, "temperature": 0, "ignore_eos": True}).encode()
        sock = socket.create_connection((server.host, server.port))
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: e2e\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        harness.wait_for(lambda: server.metrics()["dsv4_requests_running"] > 0, timeout=10)
        sock.close()

        def settled():  # the engine let it go and its handler counted it (in that order, not at once)
            m = server.metrics()
            idle = m["dsv4_requests_running"] == 0 and m["dsv4_requests_waiting"] == 0
            return m if idle and m[CANCELLED] > before[CANCELLED] else None

        after = harness.wait_for(settled, timeout=6)
        if after is None:  # let it end before the next test, then fail
            harness.wait_for(settled, timeout=60)
            self.fail("a non-streaming request whose client closed the connection was still running 6 s later")
        self.assertEqual(after[CANCELLED] - before[CANCELLED], 1)
        self.assertLess(after["dsv4_generation_tokens_total"] - before["dsv4_generation_tokens_total"], 600)

    def test_connection_burst(self):
        """64 clients connecting at the same instant are all answered (the listen backlog holds them)."""
        server = harness.shared_server()
        failures = []

        def client(barrier):
            conn = server.connection(60)
            try:
                barrier.wait(30)
                conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hi", "max_tokens": 1}),
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    failures.append(f"HTTP {resp.status}")
            except Exception as e:  # collected: the test reports how many of the 64 failed and how
                failures.append(repr(e))
            finally:
                conn.close()

        for _ in range(3):
            barrier = threading.Barrier(64)
            threads = [threading.Thread(target=client, args=(barrier,)) for _ in range(64)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        self.assertEqual(failures, [], f"{len(failures)} of 3 x 64 simultaneous requests failed")

    def test_disconnect_cancels(self):
        server = harness.shared_server()
        before = server.metrics()
        body = {"prompt": "Going away: ", "max_tokens": 2000, "temperature": 0, "ignore_eos": True, "stream": True}
        r = server.stream("/v1/completions", body, close_after=3)
        self.assertTrue(r.closed_early)
        self.assertEqual(r.finish_reasons(), [])

        def settled():  # the engine let it go and its handler counted it (in that order, not at once)
            m = server.metrics()
            idle = m["dsv4_requests_running"] == 0 and m["dsv4_requests_waiting"] == 0
            return m if idle and m[CANCELLED] > before[CANCELLED] else None

        after = harness.wait_for(settled, timeout=20)
        self.assertIsNotNone(after, "the disconnected request is still running 20 s later")
        self.assertEqual(after[CANCELLED] - before[CANCELLED], 1)
        self.assertLess(after["dsv4_generation_tokens_total"] - before["dsv4_generation_tokens_total"], 1000,
                        "cancelled long before its 2000 tokens")
        self.assertEqual(after["dsv4_sequences_in_use"], after["dsv4_prefix_cache_entries"],
                         "no sequence held but the prefix cache's")


if __name__ == "__main__":
    unittest.main()

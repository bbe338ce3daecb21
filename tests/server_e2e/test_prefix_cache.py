"""Prefix cache end to end: a conversation's second turn is served from the first turn's state (only the new tokens
computed, counted in usage.prompt_tokens_details.cached_tokens and /metrics) with the same reply as a server without
a prefix cache; a long shared system prompt is reused across users (snapshots every --prefix-snapshot tokens)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import harness

BENCH_SERVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench_serve.py")

SYSTEM = "You are a terse assistant who answers in one line. "
LONG_SYSTEM = ("You are a helpful assistant for a library of old maps. Answer questions about the history of "
               "cartography, the makers of the maps, the places they show and the ways they were printed. ") * 5
# What the V4 encoding appends to a conversation for the next user turn (after the previous reply): EOS, the user's
# message and the assistant's chat-mode prefix.
NEXT_TURN = "<｜User｜>{}<｜Assistant｜></think>"


class PrefixCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cached = harness.Server("--prefix-cache", 16, "--prefix-snapshot", 256).start()
        cls.fresh = harness.Server("--prefix-cache", 0).start()

    @classmethod
    def tearDownClass(cls):
        cls.cached.stop()
        cls.fresh.stop()

    def client(self, server):
        return harness.openai_client(server)

    def chat(self, server, messages, **kw):
        return self.client(server).chat.completions.create(model=harness.MODEL_NAME, messages=messages,
                                                           temperature=0, max_tokens=24, **kw)

    def test_second_turn(self):
        before = self.cached.metrics()
        turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me about rivers."}]
        r1 = self.chat(self.cached, turn1)
        reply = r1.choices[0].message.content
        second = "And lakes?"
        turn2 = turn1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": second}]
        r2 = self.chat(self.cached, turn2)
        cached = r2.usage.prompt_tokens_details.cached_tokens
        new_tokens = 1 + len(NEXT_TURN.format(second).encode())  # EOS + the new turn, one token per byte
        if r1.choices[0].finish_reason == "length":  # (an EOS-ended reply may count its EOS)
            self.assertEqual(r2.usage.prompt_tokens, r1.usage.prompt_tokens + r1.usage.completion_tokens + new_tokens,
                             "turn 2's prompt is turn 1's prompt, the reply, EOS and the new turn")
        self.assertGreaterEqual(cached, r1.usage.prompt_tokens, "at least turn 1's prompt comes from the cache")
        self.assertLessEqual(r2.usage.prompt_tokens - cached, new_tokens + 1,
                             "only the new turn (and at most the reply's last token) is computed")
        alone = self.chat(self.fresh, turn2)
        self.assertEqual(alone.usage.prompt_tokens_details.cached_tokens, 0, "--prefix-cache 0 caches nothing")
        self.assertEqual(alone.usage.prompt_tokens, r2.usage.prompt_tokens)
        self.assertEqual(r2.choices[0].message.content, alone.choices[0].message.content,
                         "a reply from cached state equals the recomputed one")
        self.assertEqual(r2.choices[0].finish_reason, alone.choices[0].finish_reason)
        # streamed, the same turn again: the same reply, and the usage chunk says what was cached
        chunks = list(self.chat(self.cached, turn2, stream=True, stream_options={"include_usage": True}))
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                         alone.choices[0].message.content)
        self.assertGreaterEqual(chunks[-1].usage.prompt_tokens_details.cached_tokens, cached)
        after = self.cached.metrics()
        self.assertEqual(after["dsv4_prefix_cache_queries_total"] - before["dsv4_prefix_cache_queries_total"], 3)
        self.assertGreaterEqual(after["dsv4_prefix_cache_hits_total"] - before["dsv4_prefix_cache_hits_total"], 2)
        self.assertEqual(after["dsv4_prefix_cache_hit_tokens_total"] - before["dsv4_prefix_cache_hit_tokens_total"],
                         r1.usage.prompt_tokens_details.cached_tokens + cached +
                         chunks[-1].usage.prompt_tokens_details.cached_tokens)
        fresh = self.fresh.metrics()
        self.assertEqual(fresh["dsv4_prefix_cache_hit_tokens_total"], 0)

    def test_shared_system_prompt(self):
        self.assertGreater(len(LONG_SYSTEM.encode()), 512)
        first = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "Who drew the first atlas?"}]
        other = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "What is a portolan?"}]
        self.chat(self.cached, first, max_completion_tokens=4)
        r = self.chat(self.cached, other)
        cached = r.usage.prompt_tokens_details.cached_tokens
        self.assertGreaterEqual(cached, 256, "the system prompt's snapshots are reused by another user")
        self.assertEqual(cached % 256, 0, "snapshots every 256 tokens")
        self.assertLess(cached, r.usage.prompt_tokens)
        alone = self.chat(self.fresh, other)
        self.assertEqual(r.choices[0].message.content, alone.choices[0].message.content)

    def test_completions_extension(self):
        base = harness.byte_token_ids("In the beginning the maps were drawn by hand on vellum, and ")
        first = self.cached.completion({"prompt": base, "max_tokens": 8, "temperature": 0, "ignore_eos": True})
        longer = base + harness.byte_token_ids("later printed", bos=False)
        r = self.cached.completion({"prompt": longer, "max_tokens": 8, "temperature": 0, "ignore_eos": True})
        self.assertGreaterEqual(r["usage"]["prompt_tokens_details"]["cached_tokens"], len(base))
        alone = self.fresh.completion({"prompt": longer, "max_tokens": 8, "temperature": 0, "ignore_eos": True})
        self.assertEqual(r["choices"][0]["text"], alone["choices"][0]["text"])
        self.assertEqual(first["usage"]["prompt_tokens"], len(base))

    def test_bench_serve_shared_prefix(self):
        # tools/bench_serve.py with a shared prefix: every request but the first continues from the prefix's snapshot
        # (300 shared ids, snapshots every 256), and the tool reports the share of prompt tokens the cache served.
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "bench.json")
            run = subprocess.run([sys.executable, BENCH_SERVE, "--url", self.cached.url, "--concurrency", "1,2",
                                  "--num-prompts", "4", "--input-len", "8", "--output-len", "4",
                                  "--shared-prefix", "300", "--warmup", "1", "--json", out],
                                 capture_output=True, text=True, timeout=300)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            with open(out) as f:
                settings = json.load(f)["settings"]
        self.assertEqual([s["setting"] for s in settings], ["conc 1", "conc 2"])
        for s in settings:
            self.assertEqual(s["fail"], 0, s["errors"])
            # each prompt: 300 shared ids and 8 of its own; at least the 256-id snapshot comes from the cache
            self.assertGreaterEqual(s["cached_prompt_share"], 256 / 308 - 1e-9, s)
            self.assertLess(s["cached_prompt_share"], 1.0, s)
        self.assertIn("of prompt tokens from the prefix cache", run.stdout)


if __name__ == "__main__":
    unittest.main()

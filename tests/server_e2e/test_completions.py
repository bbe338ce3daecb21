"""/v1/completions (text and token-id prompts, several prompts in one request, streaming, logprobs, stop strings, exact usage, logit_bias and
penalties, response_format json_object, vLLM's stop_token_ids, min_tokens, include_stop_str_in_output, truncate_prompt_tokens, allowed_token_ids, bad_words, guided_json and guided_choice; /tokenize and /detokenize), /v1/models, /health and /metrics (parsed; counters and histograms move by exactly what a request did)
through the openai client and raw HTTP against the shared `dsv4 serve`."""

import json
import unittest


import harness

PROMPT = "The history of the "


class CompletionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.shared_server()
        cls.client = harness.openai_client(cls.server)

    def create(self, **kw):
        kw.setdefault("model", harness.MODEL_NAME)
        kw.setdefault("prompt", PROMPT)
        kw.setdefault("temperature", 0)
        return self.client.completions.create(**kw)

    def test_text_and_ids_agree(self):
        text = self.create(max_tokens=16)
        self.assertTrue(text.id.startswith("cmpl-"), text.id)
        self.assertEqual(text.object, "text_completion")
        self.assertEqual(len(text.choices), 1)
        self.assertIn(text.choices[0].finish_reason, ("stop", "length"))
        ids = harness.byte_token_ids(PROMPT)
        self.assertEqual(text.usage.prompt_tokens, len(ids), "BOS + one token per byte")
        by_ids = self.create(prompt=ids, max_tokens=16)
        self.assertEqual(by_ids.choices[0].text, text.choices[0].text)
        self.assertEqual(by_ids.usage.prompt_tokens, len(ids))
        self.assertEqual(by_ids.usage.completion_tokens, text.usage.completion_tokens)

    def test_streaming_equals_non_streaming(self):
        whole = self.create(max_tokens=24, extra_body={"ignore_eos": True})
        chunks = list(self.create(max_tokens=24, stream=True, stream_options={"include_usage": True},
                                  extra_body={"ignore_eos": True}))
        self.assertEqual(len({c.id for c in chunks}), 1)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 24)
        self.assertEqual(chunks[-1].usage.prompt_tokens, whole.usage.prompt_tokens)
        body = chunks[:-1]
        self.assertEqual("".join(c.choices[0].text for c in body), whole.choices[0].text)
        self.assertEqual([c.choices[0].finish_reason for c in body if c.choices[0].finish_reason], ["length"])
        self.assertEqual(body[-1].choices[0].finish_reason, "length")

    def test_usage_is_exact(self):
        ids = harness.byte_token_ids("Counting tokens: ")
        for n in (1, 7, 33):
            r = self.create(prompt=ids, max_tokens=n, extra_body={"ignore_eos": True})
            self.assertEqual(r.usage.completion_tokens, n)
            self.assertEqual(r.usage.prompt_tokens, len(ids))
            self.assertEqual(r.usage.total_tokens, len(ids) + n)
            self.assertEqual(r.choices[0].finish_reason, "length")

    def test_logit_bias_and_penalties(self):
        z = harness.byte_token_ids("z")[-1]
        r = self.create(max_tokens=6, logit_bias={str(z): 100}, extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].text, "zzzzzz", "a +100 bias on 'z' picks it every time")
        # vLLM's bad_words: a word never comes out (here two bytes of the greedy text, and a letter of it)
        free = self.create(max_tokens=30, extra_body={"ignore_eos": True}).choices[0].text
        pair = next(free[i:i + 2] for i in range(len(free) - 1) if free[i:i + 2].isalpha())
        banned = self.create(max_tokens=30, extra_body={"ignore_eos": True, "bad_words": [pair, free[-1]]})
        text = banned.choices[0].text
        same = min(free.index(pair) + 1, free.index(free[-1]))  # up to the first banned id (greedy: the same before)
        self.assertEqual(text[:same], free[:same])
        self.assertNotIn(pair, text)
        self.assertNotIn(free[-1], text)
        # vLLM's allowed_token_ids: only those ids are drawn (sampled, so any of them), EOS not among them
        ab = [harness.byte_token_ids(c, bos=False)[0] for c in "ab"]
        r = self.create(max_tokens=12, temperature=1.0, seed=3, extra_body={"allowed_token_ids": ab})
        self.assertEqual((len(r.choices[0].text), set(r.choices[0].text) <= {"a", "b"}), (12, True), r.choices[0].text)
        # The same bias with a frequency penalty of 2 and a repetition penalty: still accepted, still a reply.
        r = self.create(max_tokens=6, logit_bias={str(z): 5}, frequency_penalty=2, presence_penalty=-1,
                        extra_body={"ignore_eos": True, "repetition_penalty": 1.3})
        self.assertEqual(r.usage.completion_tokens, 6)

    def test_json_object(self):
        before = self.server.metrics()
        finished = 0
        for seed in range(3):
            r = self.create(max_tokens=300, temperature=1.0, seed=seed,
                            extra_body={"response_format": {"type": "json_object"}})
            c = r.choices[0]
            if c.finish_reason == "stop":
                finished += 1
                self.assertIsInstance(json.loads(c.text), dict, c.text)
            else:
                self.assertTrue(c.text.lstrip().startswith("{"), c.text)
        self.assertGreater(finished, 0, "no reply finished within 300 tokens")
        after = self.server.metrics()
        key = 'dsv4_requests_constrained_total{kind="json_object"}'
        self.assertEqual(after[key] - before[key], 3)
        self.assertEqual(after.types.get("dsv4_requests_constrained_total"), "counter")

    def test_logprobs(self):
        r = self.create(max_tokens=10, logprobs=2, extra_body={"ignore_eos": True})
        lp = r.choices[0].logprobs
        n = r.usage.completion_tokens
        self.assertEqual(n, 10)
        self.assertEqual((len(lp.tokens), len(lp.token_logprobs), len(lp.top_logprobs), len(lp.text_offset)),
                         (n, n, n, n))
        self.assertEqual("".join(lp.tokens), r.choices[0].text)
        offset = 0
        for token, logprob, top, at in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset):
            self.assertLessEqual(logprob, 0.0)
            self.assertTrue(1 <= len(top) <= 2, top)
            self.assertIn(token, top)
            self.assertEqual(top[token], logprob)
            self.assertEqual(max(top.values()), logprob, "greedy takes the most likely token")
            self.assertEqual(at, offset, "text_offset counts the characters before each token")
            offset += len(token)
        streamed = list(self.create(max_tokens=10, logprobs=2, stream=True, extra_body={"ignore_eos": True}))
        tokens = [t for c in streamed for t in ((c.choices[0].logprobs.tokens or []) if c.choices and
                                                c.choices[0].logprobs else [])]
        offsets = [t for c in streamed for t in ((c.choices[0].logprobs.text_offset or []) if c.choices and
                                                 c.choices[0].logprobs else [])]
        self.assertEqual(tokens, lp.tokens)
        self.assertEqual(offsets, lp.text_offset)

    def test_stop_strings(self):
        full = self.create(max_tokens=40, extra_body={"ignore_eos": True}).choices[0].text
        start = next(i for i in range(len(full) // 2, len(full) - 3) if full.index(full[i:i + 3]) >= 5)
        stop = full[start:start + 3]
        cut = full[:full.index(stop)]
        r = self.create(max_tokens=40, stop=[stop, "\x07absent"], extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].text, cut)
        streamed = list(self.create(max_tokens=40, stop=stop, stream=True, extra_body={"ignore_eos": True}))
        self.assertEqual("".join(c.choices[0].text for c in streamed), cut)
        self.assertEqual(streamed[-1].choices[0].finish_reason, "stop")
        # of two stops, the one that completes first wins
        early = full[2:4] if full.index(full[2:4]) == 2 else None
        if early:
            r = self.create(max_tokens=40, stop=[stop, early], extra_body={"ignore_eos": True})
            self.assertEqual(r.choices[0].text, full[:2])

    def test_vllm_stop_ids_and_min_tokens(self):
        # stop_token_ids end the reply as EOS does (the id's text not in it); min_tokens holds them back until that
        # many tokens; guided_json is response_format json_schema by vLLM's name.
        full = self.create(max_tokens=40, extra_body={"ignore_eos": True}).choices[0].text.encode()
        k = next(i for i in range(3, len(full)) if full.index(full[i:i + 1]) == i and full[i] < 0x80)
        stop_id = harness.byte_token_ids(chr(full[k]), bos=False)[0]
        r = self.create(max_tokens=40, extra_body={"ignore_eos": True, "stop_token_ids": [stop_id]})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].text.encode(), full[:k])
        self.assertEqual(r.usage.completion_tokens, k + 1, "the stop id is a generated token")
        # truncate_prompt_tokens: only the prompt's last k tokens run (usage counts them)
        ids = harness.byte_token_ids("A longer prompt, cut to its end: ")
        cut = self.create(prompt=ids, max_tokens=6, extra_body={"ignore_eos": True, "truncate_prompt_tokens": 9})
        tail = self.create(prompt=ids[-9:], max_tokens=6, extra_body={"ignore_eos": True})
        self.assertEqual((cut.choices[0].text, cut.usage.prompt_tokens), (tail.choices[0].text, 9))
        # include_stop_str_in_output: the stop id's text, or the stop string, stays in the reply
        kept = self.create(max_tokens=40, extra_body={"ignore_eos": True, "stop_token_ids": [stop_id],
                                                      "include_stop_str_in_output": True})
        self.assertEqual(kept.choices[0].text.encode(), full[:k + 1])
        stop = full[k:k + 1].decode()
        kept = self.create(max_tokens=40, stop=[stop], extra_body={"ignore_eos": True,
                                                                   "include_stop_str_in_output": True})
        self.assertEqual((kept.choices[0].text.encode(), kept.choices[0].finish_reason), (full[:k + 1], "stop"))
        held = self.create(max_tokens=40, extra_body={"ignore_eos": True, "stop_token_ids": [stop_id],
                                                      "min_tokens": k + 3})
        self.assertGreaterEqual(held.usage.completion_tokens, k + 3)
        got = held.choices[0].text.encode()
        self.assertEqual(got[:k], full[:k], "the same greedy tokens up to the stop id")
        self.assertNotEqual(got[k:k + 1], full[k:k + 1], "where it was drawn, another token now")
        schema = {"type": "object", "required": ["n"], "additionalProperties": False,
                  "properties": {"n": {"type": "integer"}}}
        g = self.create(max_tokens=300, temperature=1.0, seed=1, extra_body={"guided_json": schema})
        if g.choices[0].finish_reason == "stop":
            self.assertIsInstance(json.loads(g.choices[0].text)["n"], int)
        self.assertTrue(g.choices[0].text.lstrip().startswith("{"), g.choices[0].text)
        choices = ["yes", "no", "maybe later"]
        for seed in range(3):
            c = self.create(max_tokens=20, temperature=1.0, seed=seed, extra_body={"guided_choice": choices})
            self.assertEqual(c.choices[0].finish_reason, "stop")
            self.assertIn(c.choices[0].text, choices)
        with self.assertRaises(Exception) as cm:
            self.create(max_tokens=4, extra_body={"guided_regex": "a+"})
        self.assertIn("guided_regex", str(cm.exception))

    def test_tokenize_and_detokenize(self):
        # vLLM's /tokenize counts what a request runs: a text prompt as /v1/completions runs it (BOS first), messages
        # as /v1/chat/completions renders them; /detokenize gives the ids' text back.
        status, t = self.server.post("/tokenize", {"prompt": PROMPT})
        self.assertEqual(status, 200, t)
        self.assertEqual(t["tokens"], harness.byte_token_ids(PROMPT))
        self.assertEqual(t["count"], len(t["tokens"]))
        self.assertEqual(t["count"], self.create(max_tokens=1).usage.prompt_tokens)
        self.assertGreater(t["max_model_len"], 0)
        _, plain = self.server.post("/tokenize", {"prompt": PROMPT, "add_special_tokens": False})
        self.assertEqual(plain["tokens"], t["tokens"][1:])
        messages = [{"role": "user", "content": "Weather in Paris?"}]
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
        _, chat = self.server.post("/tokenize", {"messages": messages, "tools": tools})
        used = self.server.chat({"messages": messages, "tools": tools, "max_tokens": 1})
        self.assertEqual(chat["count"], used["usage"]["prompt_tokens"])
        status, d = self.server.post("/detokenize", {"tokens": plain["tokens"]})
        self.assertEqual(status, 200, d)
        self.assertEqual(d["prompt"], PROMPT)
        for path, body, field in (("/tokenize", {}, "prompt"), ("/detokenize", {"tokens": [-1]}, "tokens"),
                                  ("/tokenize", {"messages": []}, "messages")):
            status, e = self.server.post(path, body)
            self.assertEqual(status, 400, (path, body, e))
            self.assertEqual(e["error"]["param"], field)

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], [harness.MODEL_NAME])
        self.assertEqual(models.data[0].object, "model")
        status, headers, body = self.server.request("GET", "/v1/models")
        self.assertEqual(status, 200)
        self.assertIn("application/json", headers.get("content-type", ""))

    def test_echo_scores_the_prompt(self):
        # echo + logprobs + max_tokens 0, as lm-evaluation-harness scores a text: one entry per prompt id, the first
        # (nothing before it) null; at each position the same alternatives and logprobs as a one-token request on
        # the ids before it reports for its token.
        ids = harness.byte_token_ids(PROMPT)
        r = self.server.completion({"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 2, "temperature": 0})
        choice, usage = r["choices"][0], r["usage"]
        lp = choice["logprobs"]
        self.assertEqual(len(lp["tokens"]), len(ids))
        self.assertIsNone(lp["token_logprobs"][0])
        self.assertIsNone(lp["top_logprobs"][0])
        self.assertTrue(choice["text"].endswith(PROMPT), choice["text"])
        self.assertEqual(choice["finish_reason"], "length")
        self.assertEqual((usage["prompt_tokens"], usage["completion_tokens"]), (len(ids), 0))
        for t in (1, 5, len(ids) - 1):
            one = self.server.completion({"prompt": ids[:t], "max_tokens": 1, "logprobs": 2, "temperature": 0})
            self.assertEqual(lp["top_logprobs"][t], one["choices"][0]["logprobs"]["top_logprobs"][0], f"position {t}")
            self.assertLessEqual(lp["token_logprobs"][t], 0.0)
        # A text prompt: its text comes back as sent, every one of its tokens scored (the BOS before it is the
        # server's), then the generated text; streamed, the chunks add up to the same text and logprob entries.
        whole = self.create(max_tokens=6, echo=True, logprobs=1, extra_body={"ignore_eos": True})
        text = whole.choices[0].text
        self.assertTrue(text.startswith(PROMPT), text)
        self.assertEqual(len(whole.choices[0].logprobs.tokens), len(ids) - 1 + 6)
        self.assertIsNotNone(whole.choices[0].logprobs.token_logprobs[0])
        self.assertEqual(text[len(PROMPT):], self.create(max_tokens=6, extra_body={"ignore_eos": True}).choices[0].text)
        chunks = list(self.create(max_tokens=6, echo=True, logprobs=1, stream=True, extra_body={"ignore_eos": True}))
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), text)
        self.assertEqual(sum(len(c.choices[0].logprobs.tokens) for c in chunks if c.choices and c.choices[0].logprobs),
                         len(ids) - 1 + 6)

    def test_several_choices(self):
        # n = 3: choice i is what one request with seed + i gets; the prompt is computed once (choices 1 and 2
        # continue from the prefix cache); usage counts the prompt once and every choice's tokens; streamed, each
        # choice's chunks carry its index and add up to its text.
        kw = dict(max_tokens=10, temperature=0.9, seed=77, extra_body={"ignore_eos": True})
        before = self.server.metrics()
        several = self.create(n=3, **kw)
        after = self.server.metrics()
        prompt_len = len(harness.byte_token_ids(PROMPT))
        self.assertEqual([c.index for c in several.choices], [0, 1, 2])
        self.assertEqual(several.usage.prompt_tokens, prompt_len)
        self.assertEqual(several.usage.completion_tokens, 30)
        self.assertGreaterEqual(after["dsv4_prefix_cache_hit_tokens_total"] - before["dsv4_prefix_cache_hit_tokens_total"],
                                2 * prompt_len)
        self.assertEqual(after['dsv4_requests_total{finish_reason="length"}'] -
                         before['dsv4_requests_total{finish_reason="length"}'], 3, "each choice is counted")
        for i, choice in enumerate(several.choices):
            self.assertEqual(choice.finish_reason, "length")
            alone = self.create(**dict(kw, seed=77 + i))
            self.assertEqual(choice.text, alone.choices[0].text, f"choice {i} vs one request with seed {77 + i}")
        texts, finishes = ["", "", ""], [None, None, None]
        for chunk in self.create(n=3, stream=True, **kw):
            for c in chunk.choices:
                texts[c.index] += c.text
                if c.finish_reason:
                    finishes[c.index] = c.finish_reason
        self.assertEqual(texts, [c.text for c in several.choices])
        self.assertEqual(finishes, ["length"] * 3)

    def test_several_prompts(self):
        # A list of prompts (strings and id arrays) with n = 2: choice p * 2 + j is prompt p's j-th and equals that
        # prompt alone on seed + j; usage adds up every prompt and choice; streamed, the chunks carry those indexes.
        prompts = ["Rivers run ", harness.byte_token_ids("Lakes are ")[1:], "Mountains "]
        kw = dict(max_tokens=5, temperature=0.9, seed=11, n=2, extra_body={"ignore_eos": True})
        several = self.create(prompt=prompts, **kw)
        self.assertEqual([c.index for c in several.choices], list(range(6)))
        alone = [self.create(prompt=p, **kw) for p in prompts]
        for p, a in enumerate(alone):
            for j in range(2):
                self.assertEqual(several.choices[2 * p + j].text, a.choices[j].text, f"prompt {p}, choice {j}")
                self.assertEqual(several.choices[2 * p + j].finish_reason, "length")
        self.assertEqual(several.usage.prompt_tokens, sum(a.usage.prompt_tokens for a in alone))
        self.assertEqual(several.usage.completion_tokens, 30)
        texts = [""] * 6
        usage = None
        for chunk in self.create(prompt=prompts, stream=True, stream_options={"include_usage": True}, **kw):
            for c in chunk.choices:
                texts[c.index] += c.text
            usage = chunk.usage or usage
        self.assertEqual(texts, [c.text for c in several.choices])
        self.assertEqual((usage.prompt_tokens, usage.completion_tokens), (several.usage.prompt_tokens, 30))
        # Scoring several texts in one request (echo, logprobs, max_tokens 0), as evaluation harnesses batch them.
        ids = [harness.byte_token_ids(t) for t in ("One text ", "and another")]
        scored = self.server.completion({"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1,
                                         "temperature": 0})
        for p, choice in enumerate(scored["choices"]):
            one = self.server.completion({"prompt": ids[p], "max_tokens": 0, "echo": True, "logprobs": 1,
                                          "temperature": 0})["choices"][0]
            self.assertEqual(choice["index"], p)
            self.assertEqual(choice["text"], one["text"])
            self.assertEqual(choice["logprobs"], one["logprobs"])

    def test_health(self):
        status, _, _ = self.server.request("GET", "/health")
        self.assertEqual(status, 200)

    def test_metrics_move_with_a_request(self):
        before = self.server.metrics()
        ids = harness.byte_token_ids("Metrics: ")
        n = 9
        r = self.server.completion({"prompt": ids, "max_tokens": n, "temperature": 0, "ignore_eos": True})
        self.assertEqual(r["usage"]["completion_tokens"], n)
        after = self.server.metrics()

        def delta(key):
            return after[key] - before[key]

        self.assertEqual(delta("dsv4_generation_tokens_total"), n)
        self.assertEqual(delta("dsv4_prompt_tokens_total"), len(ids))
        self.assertEqual(delta('dsv4_requests_total{finish_reason="length"}'), 1)
        self.assertEqual(delta("dsv4_time_to_first_token_seconds_count"), 1)
        self.assertEqual(delta("dsv4_inter_token_latency_seconds_count"), n - 1)
        self.assertEqual(delta("dsv4_prefix_cache_queries_total"), 1)
        self.assertEqual(delta("dsv4_prefix_cache_hit_tokens_total"), r["usage"]["prompt_tokens_details"]
                         ["cached_tokens"])
        self.assertGreater(delta("dsv4_time_to_first_token_seconds_sum"), 0)
        for gauge in ("dsv4_requests_running", "dsv4_requests_waiting"):
            self.assertEqual(after[gauge], 0, gauge)
        # The scrape's own connection holds a thread (kept-alive ones may too); none waits for one.
        self.assertGreaterEqual(after["dsv4_http_connections_busy"], 1)
        self.assertEqual(after["dsv4_http_connections_waiting"], 0)
        self.assertGreaterEqual(after["dsv4_http_connections_limit"], 128)
        self.check_metrics_format(after)

    def check_metrics_format(self, m):
        for name in ("dsv4_requests_running", "dsv4_requests_waiting", "dsv4_state_pool_pages_used",
                     "dsv4_state_pool_pages_total", "dsv4_sequences_in_use", "dsv4_http_connections_limit",
                     "dsv4_http_connections_busy", "dsv4_http_connections_waiting"):
            self.assertEqual(m.types.get(name), "gauge", name)
            self.assertGreaterEqual(m[name], 0)
        for name in ("dsv4_prompt_tokens_total", "dsv4_generation_tokens_total", "dsv4_prefix_cache_hit_tokens_total",
                     "dsv4_prefix_cache_queries_total", "dsv4_prefix_cache_hits_total"):
            self.assertEqual(m.types.get(name), "counter", name)
        self.assertEqual(m.types.get("dsv4_requests_total"), "counter")
        for reason in ("stop", "length", "tool_calls", "cancelled", "error"):
            self.assertGreaterEqual(m[f'dsv4_requests_total{{finish_reason="{reason}"}}'], 0)
        self.assertLessEqual(m["dsv4_prefix_cache_hits_total"], m["dsv4_prefix_cache_queries_total"])
        self.assertLessEqual(m["dsv4_state_pool_pages_used"], m["dsv4_state_pool_pages_total"])
        if harness.BACKEND == "cpu":
            self.assertEqual(m["dsv4_state_pool_pages_total"], 0)
        for name in ("dsv4_time_to_first_token_seconds", "dsv4_inter_token_latency_seconds"):
            self.assertEqual(m.types.get(name), "histogram", name)
            buckets = m.buckets(name)
            self.assertGreaterEqual(len(buckets), 2, name)
            les = [le for le, _ in buckets]
            self.assertEqual(les, sorted(les), f"{name}: le ascending")
            self.assertEqual(les[-1], float("inf"), f"{name}: the last bucket is +Inf")
            counts = [c for _, c in buckets]
            self.assertEqual(counts, sorted(counts), f"{name}: buckets are cumulative")
            self.assertEqual(counts[-1], m[name + "_count"], f"{name}: +Inf bucket == _count")
            self.assertGreaterEqual(m[name + "_sum"], 0)


if __name__ == "__main__":
    unittest.main()

"""/v1/chat/completions through the real openai client: non-streaming and streaming (the deltas add up to the
non-streamed message), thinking on / off (reasoning_content beside content, both from what the model generated), a
tool-call round trip, logprobs, stop strings, max_completion_tokens, seeded sampling, response_format json_object
and json_schema (whatever the byte soup, a finished reply's content is one JSON object, of the schema's shape). The fixture was never trained
on chat, so replies are byte soup: the tests check structure and invariants, and compare with /v1/completions on the
prompt the V4 encoding renders (spec/dsv4-encoding.md), never content."""

import json
import unittest

import openai

import harness

USER = "Hi"
# The V4 encoding of one user turn (BOS is added by the server for both endpoints): chat mode ends the assistant's
# prefix with </think>, thinking mode with <think>.
CHAT_PROMPT = "<｜User｜>" + USER + "<｜Assistant｜></think>"
THINK_PROMPT = "<｜User｜>" + USER + "<｜Assistant｜><think>"

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]


def extra(obj, name):
    """A field the openai SDK does not model (reasoning_content): kept in model_extra."""
    value = getattr(obj, name, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(name)
    return value


class ChatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.shared_server()
        cls.client = harness.openai_client(cls.server)

    def create(self, **kw):
        kw.setdefault("model", harness.MODEL_NAME)
        kw.setdefault("messages", [{"role": "user", "content": USER}])
        kw.setdefault("temperature", 0)
        return self.client.chat.completions.create(**kw)

    def raw_completion(self, prompt, max_tokens):
        return self.server.completion({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})

    def test_non_streaming(self):
        r = self.create(max_tokens=12)
        self.assertTrue(r.id.startswith("chatcmpl-"), r.id)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, harness.MODEL_NAME)
        self.assertEqual(len(r.choices), 1)
        choice = r.choices[0]
        self.assertEqual(choice.index, 0)
        self.assertEqual(choice.message.role, "assistant")
        self.assertIsInstance(choice.message.content, str)
        self.assertIsNone(extra(choice.message, "reasoning_content"), "thinking is off by default")
        self.assertIsNone(choice.message.tool_calls)
        self.assertIn(choice.finish_reason, ("stop", "length"))
        u = r.usage
        self.assertEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens)
        self.assertLessEqual(u.completion_tokens, 12)
        if choice.finish_reason == "length":
            self.assertEqual(u.completion_tokens, 12)
        self.assertIsNotNone(u.prompt_tokens_details)
        self.assertGreaterEqual(u.prompt_tokens_details.cached_tokens, 0)
        # a whole prompt computed before is served with its last logits, so every prompt token may be cached
        self.assertLessEqual(u.prompt_tokens_details.cached_tokens, u.prompt_tokens)
        again = self.create(max_tokens=12)
        self.assertEqual(again.choices[0].message.content, choice.message.content, "greedy is deterministic")
        self.assertNotEqual(again.id, r.id, "response ids are unique")

    def test_prompt_is_the_v4_encoding(self):
        # Thinking off: the reply is exactly what the model generates after the chat-mode prompt.
        r = self.create(max_tokens=16)
        raw = self.raw_completion(CHAT_PROMPT, 16)
        self.assertEqual(r.usage.prompt_tokens, raw["usage"]["prompt_tokens"])
        self.assertEqual(r.choices[0].message.content, raw["choices"][0]["text"])

    def test_a_prefix_message_is_continued(self):
        # DeepSeek's "prefix": the reply continues the last assistant message's content: what the model generates after
        # the prompt that ends with it, in thinking mode too (its reasoning closed there; the reply is content).
        prefix = "Sure"
        for thinking, cue in ((False, "</think>"), (True, "<think>why</think>")):
            with self.subTest(thinking=thinking):
                r = self.create(max_tokens=12, extra_body={"chat_template_kwargs": {"thinking": thinking}},
                                messages=[{"role": "user", "content": USER},
                                          {"role": "assistant", "content": prefix, "prefix": True,
                                           "reasoning_content": "why"}])
                raw = self.raw_completion("<｜User｜>" + USER + "<｜Assistant｜>" + cue + prefix, 12)
                self.assertEqual(r.usage.prompt_tokens, raw["usage"]["prompt_tokens"])
                self.assertEqual(r.choices[0].message.content, raw["choices"][0]["text"])
                self.assertIsNone(extra(r.choices[0].message, "reasoning_content"))
        with self.assertRaises(openai.BadRequestError) as cm:
            self.create(max_tokens=4, messages=[{"role": "user", "content": USER},
                                                {"role": "assistant", "content": prefix}])
        self.assertIn("prefix", str(cm.exception.body))

    def test_streaming_equals_non_streaming(self):
        for thinking in (False, True):
            with self.subTest(thinking=thinking):
                kw = dict(max_tokens=20, extra_body={"chat_template_kwargs": {"thinking": thinking}})
                whole = self.create(**kw)
                chunks = list(self.create(stream=True, stream_options={"include_usage": True}, **kw))
                self.assertGreaterEqual(len(chunks), 3)
                self.assertEqual(len({c.id for c in chunks}), 1, "one id for every chunk")
                self.assertTrue(chunks[0].id.startswith("chatcmpl-"))
                for c in chunks:
                    self.assertEqual(c.object, "chat.completion.chunk")
                    self.assertEqual(c.model, harness.MODEL_NAME)
                self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
                # with include_usage: a last chunk with no choices and the usage, null usage before it
                self.assertEqual(chunks[-1].choices, [])
                self.assertIsNotNone(chunks[-1].usage)
                for c in chunks[:-1]:
                    self.assertIsNone(c.usage)
                    self.assertEqual(len(c.choices), 1)
                finishes = [c.choices[0].finish_reason for c in chunks[:-1] if c.choices[0].finish_reason]
                self.assertEqual(finishes, [whole.choices[0].finish_reason], "one finishing chunk, at the end")
                self.assertIsNotNone(chunks[-2].choices[0].finish_reason)
                content = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
                reasoning = "".join(extra(c.choices[0].delta, "reasoning_content") or "" for c in chunks[:-1])
                self.assertEqual(content, whole.choices[0].message.content or "")
                self.assertEqual(reasoning, extra(whole.choices[0].message, "reasoning_content") or "")
                u, wu = chunks[-1].usage, whole.usage
                self.assertEqual((u.prompt_tokens, u.completion_tokens, u.total_tokens),
                                 (wu.prompt_tokens, wu.completion_tokens, wu.total_tokens))

    def test_streaming_without_usage(self):
        chunks = list(self.create(max_tokens=6, stream=True))
        self.assertTrue(all(c.choices for c in chunks), "no usage chunk unless include_usage")
        self.assertTrue(all(c.usage is None for c in chunks))
        self.assertIsNotNone(chunks[-1].choices[0].finish_reason)

    def test_thinking_on_off(self):
        n = 24
        off = self.create(max_tokens=n)
        self.assertIsNone(extra(off.choices[0].message, "reasoning_content"))
        on_kwargs = self.create(max_tokens=n, extra_body={"chat_template_kwargs": {"thinking": True}})
        on_top = self.create(max_tokens=n, extra_body={"thinking": {"type": "enabled"}})
        raw = self.raw_completion(THINK_PROMPT, n)
        self.assertEqual(on_kwargs.usage.prompt_tokens, raw["usage"]["prompt_tokens"])
        self.assertEqual(on_kwargs.usage.prompt_tokens, off.usage.prompt_tokens - 1, "<think> vs </think>")
        for r in (on_kwargs, on_top):
            m = r.choices[0].message
            reasoning = extra(m, "reasoning_content") or ""
            content = m.content or ""
            self.assertEqual(r.usage.prompt_tokens, on_kwargs.usage.prompt_tokens)
            # What the model generated is reasoning, then (after </think>) content; no markup leaks into either.
            text = raw["choices"][0]["text"]
            if "</think>" in text:
                self.assertEqual(reasoning + "</think>" + content, text)
            else:
                self.assertEqual(reasoning, text)
                self.assertEqual(content, "")
            self.assertNotIn("<think>", content)
            self.assertNotIn("</think>", content + reasoning)
        self.assertEqual(extra(on_top.choices[0].message, "reasoning_content"),
                         extra(on_kwargs.choices[0].message, "reasoning_content"))
        # reasoning_effort alone turns thinking on; "none" keeps chat mode
        effort = self.create(max_tokens=n, reasoning_effort="high")
        self.assertIsNotNone(extra(effort.choices[0].message, "reasoning_content"))
        none = self.create(max_tokens=n, extra_body={"reasoning_effort": "none"})
        self.assertIsNone(extra(none.choices[0].message, "reasoning_content"))
        self.assertEqual(none.choices[0].message.content, off.choices[0].message.content)
        explicit_off = self.create(max_tokens=n, extra_body={"chat_template_kwargs": {"thinking": False}})
        self.assertEqual(explicit_off.choices[0].message.content, off.choices[0].message.content)

    def test_tool_call_round_trip(self):
        asked = self.create(max_tokens=8, tools=TOOLS, tool_choice="auto",
                            messages=[{"role": "user", "content": "Weather in Paris?"}])
        self.assertIn(asked.choices[0].finish_reason, ("stop", "length", "tool_calls"))
        plain = self.create(max_tokens=8, messages=[{"role": "user", "content": "Weather in Paris?"}])
        self.assertGreater(asked.usage.prompt_tokens, plain.usage.prompt_tokens + 50, "the tools reach the prompt")
        # The client runs the tool and sends the call and its result back: the server renders both.
        history = [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 21, "sky": "clear"}'},
        ]
        back = self.create(max_tokens=8, tools=TOOLS, messages=history)
        self.assertIn(back.choices[0].finish_reason, ("stop", "length", "tool_calls"))
        self.assertEqual(back.choices[0].message.role, "assistant")
        self.assertGreater(back.usage.prompt_tokens, asked.usage.prompt_tokens, "call and result are rendered")
        self.assertGreater(back.usage.completion_tokens, 0)
        # The same history streamed gives the same reply.
        chunks = list(self.create(max_tokens=8, tools=TOOLS, messages=history, stream=True))
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks), back.choices[0].message.content
                         or "")
        # A named function: the reply begins with its call (the opening forced; here the reply is that opening, one
        # token a byte, which the parser reads as the call with no arguments); "required": one of the tools.
        opening = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
        forced = self.create(max_tokens=len(opening.encode()), tools=TOOLS, messages=history, temperature=1.0, seed=5,
                             tool_choice={"type": "function", "function": {"name": "get_weather"}})
        self.assertEqual(forced.choices[0].message.role, "assistant")
        calls = forced.choices[0].message.tool_calls
        self.assertIsNotNone(calls, forced)
        self.assertEqual([c.function.name for c in calls], ["get_weather"])
        self.assertEqual(calls[0].function.arguments, "{}")
        required = self.create(max_tokens=len(opening.encode()), tools=TOOLS, messages=history, tool_choice="required")
        self.assertEqual([c.function.name for c in required.choices[0].message.tool_calls], ["get_weather"])
        none = self.create(max_tokens=4, tools=TOOLS, messages=history, tool_choice="none")
        self.assertEqual(none.choices[0].message.role, "assistant")
        with self.assertRaises(openai.BadRequestError) as cm:
            self.create(max_tokens=4, tools=TOOLS, messages=history,
                        tool_choice={"type": "function", "function": {"name": "get_time"}})
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn("tool_choice", str(cm.exception.body))

    def test_strict_tool_calls_keep_to_their_schema(self):
        # A strict tool's arguments are enforced from its schema (whatever the byte soup), the block is one the parser
        # reads, and with parallel_tool_calls false the reply ends after its one call: finish_reason "tool_calls".
        strict = [{"type": "function", "function": {
            "name": "get_weather", "strict": True,
            "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                           "properties": {"city": {"type": "string", "maxLength": 3},
                                          "days": {"type": "integer", "enum": [1, 2]}}}}}]
        finished = 0
        for seed in range(3):
            c = self.create(max_tokens=400, tools=strict, tool_choice="required", parallel_tool_calls=False,
                            temperature=1.0, seed=seed,
                            messages=[{"role": "user", "content": "Weather in Paris?"}]).choices[0]
            if c.finish_reason == "length":
                continue
            finished += 1
            self.assertEqual(c.finish_reason, "tool_calls", c)
            self.assertEqual(len(c.message.tool_calls), 1, c)
            call = c.message.tool_calls[0]
            self.assertEqual(call.function.name, "get_weather")
            args = json.loads(call.function.arguments)
            self.assertEqual(set(args), {"city", "days"}, args)
            self.assertIsInstance(args["city"], str)
            self.assertLessEqual(len(args["city"]), 3, args)
            self.assertIn(args["days"], (1, 2), args)
        self.assertGreater(finished, 0, "no reply finished within 400 tokens")
        # Under "auto" a strict tool's schema holds too; a schema outside the subset is refused, not ignored.
        with self.assertRaises(openai.BadRequestError) as cm:
            self.create(max_tokens=4, tools=[{"type": "function", "function": {
                "name": "f", "strict": True,
                "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}}}])
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn("minimum", str(cm.exception.body))

    def test_logprobs(self):
        r = self.create(max_tokens=8, logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "length")
        entries = choice.logprobs.content
        self.assertEqual(len(entries), r.usage.completion_tokens)
        self.assertEqual(r.usage.completion_tokens, 8)
        for e in entries:
            self.assertLessEqual(e.logprob, 0.0)
            self.assertEqual(len(e.top_logprobs), 3)
            tops = [t.logprob for t in e.top_logprobs]
            self.assertEqual(tops, sorted(tops, reverse=True), "top_logprobs most likely first")
            # greedy: the chosen token is the most likely one
            self.assertEqual(e.top_logprobs[0].token, e.token)
            self.assertEqual(e.top_logprobs[0].logprob, e.logprob)
            self.assertEqual(len({t.token for t in e.top_logprobs}), 3)
            if not e.token.startswith("bytes:"):
                self.assertEqual(bytes(e.bytes), e.token.encode())
        self.assertEqual("".join(e.token for e in entries), choice.message.content)
        plain = self.create(max_tokens=8, logprobs=True, extra_body={"ignore_eos": True})
        self.assertEqual([e.logprob for e in plain.choices[0].logprobs.content], [e.logprob for e in entries])
        self.assertTrue(all(not e.top_logprobs for e in plain.choices[0].logprobs.content))
        self.assertIsNone(self.create(max_tokens=2).choices[0].logprobs)
        # streamed logprobs: one entry per token over the chunks, the same numbers
        chunks = list(self.create(max_tokens=8, logprobs=True, top_logprobs=3, stream=True,
                                  extra_body={"ignore_eos": True}))
        streamed = [e for c in chunks for e in ((c.choices[0].logprobs.content or []) if c.choices and
                                                c.choices[0].logprobs else [])]
        self.assertEqual([(e.token, e.logprob) for e in streamed], [(e.token, e.logprob) for e in entries])

    def test_stop_strings(self):
        full = self.create(max_tokens=40, extra_body={"ignore_eos": True}).choices[0].message.content
        self.assertGreaterEqual(len(full), 30, full)
        stop = pick_stop(full)
        cut = full[:full.index(stop)]
        r = self.create(max_tokens=40, stop=[stop], extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].message.content, cut)
        self.assertNotIn(stop, r.choices[0].message.content)
        chunks = list(self.create(max_tokens=40, stop=stop, stream=True, extra_body={"ignore_eos": True}))
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices), cut)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "stop")
        absent = self.create(max_tokens=40, stop=["\x07never"], extra_body={"ignore_eos": True})
        self.assertEqual(absent.choices[0].message.content, full)
        self.assertEqual(absent.choices[0].finish_reason, "length")

    def test_max_completion_tokens(self):
        for n in (1, 5):
            r = self.create(max_completion_tokens=n, extra_body={"ignore_eos": True})
            self.assertEqual(r.usage.completion_tokens, n)
            self.assertEqual(r.choices[0].finish_reason, "length")

    def test_seeded_sampling(self):
        kw = dict(max_tokens=16, temperature=0.9, top_p=0.95, seed=1234,
                  extra_body={"top_k": 50, "min_p": 0.01, "ignore_eos": True})
        a = self.create(**kw).choices[0].message.content
        b = self.create(**kw).choices[0].message.content
        self.assertEqual(a, b, "the same seed samples the same reply")
        self.assertEqual(self.create(max_tokens=4, temperature=1.0, extra_body={"top_k": 1}).choices[0].message
                         .content, self.create(max_tokens=4).choices[0].message.content, "top_k 1 is greedy")


    def assert_json_object_reply(self, content, finish_reason, context):
        """A finished reply is one JSON object; one cut by max_tokens is the start of one."""
        self.assertIsInstance(content, str, context)
        if finish_reason == "stop":
            self.assertIsInstance(json.loads(content), dict, f"{context}: {content!r}")
        else:
            self.assertEqual(finish_reason, "length", context)
            self.assertTrue(content.lstrip().startswith("{"), f"{context}: {content!r}")

    def test_json_object(self):
        fmt = {"type": "json_object"}
        for seed in range(4):
            r = self.create(max_tokens=48, response_format=fmt, temperature=1.0, seed=seed)
            c = r.choices[0]
            self.assert_json_object_reply(c.message.content, c.finish_reason, f"seed {seed}")
        # Greedy: the same reply streamed; one that runs out of tokens is a prefix of the longer one.
        whole = self.create(max_tokens=48, response_format=fmt)
        streamed = "".join(ch.choices[0].delta.content or "" for ch in self.create(
            max_tokens=48, response_format=fmt, stream=True) if ch.choices)
        self.assertEqual(streamed, whole.choices[0].message.content)
        short = self.create(max_tokens=5, response_format=fmt).choices[0].message.content
        self.assertTrue(whole.choices[0].message.content.startswith(short), (short, whole.choices[0].message.content))
        # Thinking: the reasoning is free, the content after </think> is the object.
        r = self.create(max_tokens=64, response_format=fmt, temperature=1.0, seed=3,
                        extra_body={"chat_template_kwargs": {"thinking": True}})
        c = r.choices[0]
        if c.finish_reason == "stop":
            self.assert_json_object_reply(c.message.content, "stop", "thinking")

    def test_json_schema(self):
        schema = {"type": "object", "additionalProperties": False, "required": ["ok", "n"],
                  "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"},
                                 "tag": {"anyOf": [{"enum": ["a", "b"]}, {"type": "null"}]}}}
        fmt = {"type": "json_schema", "json_schema": {"name": "probe", "strict": True, "schema": schema}}
        finished = 0
        for seed in range(3):  # the fixture pads with whitespace between tokens: room for it
            c = self.create(max_tokens=400, response_format=fmt, temperature=1.0, seed=seed).choices[0]
            self.assert_json_object_reply(c.message.content, c.finish_reason, f"seed {seed}")
            if c.finish_reason == "stop":
                finished += 1
                v = json.loads(c.message.content)
                self.assertEqual(set(v) - {"tag"}, {"ok", "n"}, v)
                self.assertIsInstance(v["ok"], bool)
                self.assertIsInstance(v["n"], int)
                self.assertIn(v.get("tag"), ("a", "b", None))
        self.assertGreater(finished, 0, "no reply finished within 400 tokens")

    def test_several_choices_streamed(self):
        # n = 2 streamed: each choice opens with its role, its deltas carry its index and add up to the non-streamed
        # choice; a stop string ends one choice without ending the other.
        kw = dict(max_tokens=12, temperature=0.8, seed=5, n=2, extra_body={"ignore_eos": True})
        whole = self.create(**kw)
        self.assertEqual([c.index for c in whole.choices], [0, 1])
        self.assertEqual(whole.usage.completion_tokens, 24)
        roles, texts, finishes = [None, None], ["", ""], [None, None]
        for chunk in self.create(stream=True, **kw):
            for c in chunk.choices:
                if c.delta.role:
                    roles[c.index] = c.delta.role
                texts[c.index] += c.delta.content or ""
                if c.finish_reason:
                    finishes[c.index] = c.finish_reason
        self.assertEqual(roles, ["assistant", "assistant"])
        self.assertEqual(texts, [c.message.content for c in whole.choices])
        self.assertEqual(finishes, ["length", "length"])


def pick_stop(text):
    """A 3-character substring from the middle of `text` whose first occurrence is at least 5 characters in."""
    for start in range(len(text) // 2, len(text) - 3):
        s = text[start:start + 3]
        if text.index(s) >= 5 and s.strip():
            return s
    raise AssertionError(f"no stop string to pick in {text!r}")


if __name__ == "__main__":
    unittest.main()

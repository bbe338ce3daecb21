"""/v1/messages (Anthropic's Messages API, which DeepSeek's API also speaks) over raw HTTP: the reply is what
/v1/chat/completions gives for the same conversation (the fixture's byte soup: the tests compare, never read
content); streamed events add up to the message; thinking as a thinking block; a forced tool call as a tool_use block
whose input is an object of the tool's schema, sent back as tool_result; stop_sequences; errors in Anthropic's
shape; claude-* model names taken as the served model; x-api-key; /v1/messages/count_tokens."""

import json
import unittest

import harness

USER = "Weather in Paris?"
TOOL = {"name": "get_weather", "description": "The weather in a city", "strict": True,
        "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 3}},
                         "required": ["city"], "additionalProperties": False}}


class MessagesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.shared_server()

    def create(self, **body):
        body.setdefault("model", "claude-sonnet-4-5")
        body.setdefault("max_tokens", 12)
        body.setdefault("temperature", 0)
        body.setdefault("messages", [{"role": "user", "content": USER}])
        status, obj = self.server.post("/v1/messages", body)
        self.assertEqual(status, 200, obj)
        return obj

    def test_text_reply_is_the_chat_reply(self):
        m = self.create(system="Be brief.")
        self.assertTrue(m["id"].startswith("msg_"), m)
        self.assertEqual((m["type"], m["role"]), ("message", "assistant"))
        c = self.server.chat({"messages": [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": USER}], "max_tokens": 12, "temperature": 0})
        self.assertEqual([b["type"] for b in m["content"]], ["text"])
        self.assertEqual(m["content"][0]["text"], c["choices"][0]["message"]["content"])
        self.assertEqual(m["usage"]["input_tokens"], c["usage"]["prompt_tokens"])
        self.assertEqual(m["usage"]["output_tokens"], c["usage"]["completion_tokens"])
        want = {"length": "max_tokens", "stop": "end_turn"}[c["choices"][0]["finish_reason"]]
        self.assertEqual(m["stop_reason"], want)
        blocks = self.create(system=[{"type": "text", "text": "Be brief."}],
                             messages=[{"role": "user", "content": [{"type": "text", "text": USER}]}])
        self.assertEqual(blocks["content"], m["content"])

    def test_streamed_events_add_up_to_the_message(self):
        body = {"model": harness.MODEL_NAME, "max_tokens": 24, "temperature": 0, "thinking": {"type": "enabled",
                "budget_tokens": 1024}, "messages": [{"role": "user", "content": USER}]}
        status, whole = self.server.post("/v1/messages", body)
        self.assertEqual(status, 200, whole)
        self.assertEqual(whole["content"][0]["type"], "thinking")
        r = self.server.stream("/v1/messages", dict(body, stream=True))
        self.assertEqual(r.status, 200, r.error)
        types = [e["type"] for e in r.chunks]
        self.assertEqual(types[0], "message_start")
        self.assertEqual(types[-2:], ["message_delta", "message_stop"])
        self.assertEqual(r.chunks[0]["message"]["usage"]["input_tokens"], whole["usage"]["input_tokens"])
        blocks = {}
        for e in r.chunks:
            if e["type"] == "content_block_start":
                blocks[e["index"]] = dict(e["content_block"])
            elif e["type"] == "content_block_delta":
                d = e["delta"]
                b = blocks[e["index"]]
                if d["type"] == "thinking_delta":
                    b["thinking"] += d["thinking"]
                elif d["type"] == "text_delta":
                    b["text"] += d["text"]
        self.assertEqual([blocks[i] for i in sorted(blocks)], whole["content"])
        self.assertEqual(r.chunks[-2]["delta"]["stop_reason"], whole["stop_reason"])
        self.assertEqual(r.chunks[-2]["usage"]["output_tokens"], whole["usage"]["output_tokens"])

    def test_tool_use_round_trip(self):
        # The budget covers the longest call the grammar allows (harness.TOOL_CALL_BUDGET); at 200 a call sampled with
        # long whitespace around its value was cut off (stop_reason "max_tokens").
        m = self.create(max_tokens=harness.TOOL_CALL_BUDGET, temperature=1.0, tools=[TOOL],
                        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
        self.assertEqual(m["stop_reason"], "tool_use", m)
        uses = [b for b in m["content"] if b["type"] == "tool_use"]
        self.assertEqual(len(uses), 1, m)
        self.assertEqual(uses[0]["name"], "get_weather")
        self.assertIsInstance(uses[0]["input"]["city"], str)
        self.assertLessEqual(len(uses[0]["input"]["city"]), 3)
        back = self.create(tools=[TOOL], messages=[
            {"role": "user", "content": USER},
            {"role": "assistant", "content": [uses[0]]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"],
                                          "content": "sunny"}]}])
        self.assertGreater(back["usage"]["input_tokens"], m["usage"]["input_tokens"])
        r = self.server.stream("/v1/messages", {
            "model": "claude-opus-4", "max_tokens": harness.TOOL_CALL_BUDGET, "temperature": 1.0, "tools": [TOOL],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True}, "stream": True,
            "messages": [{"role": "user", "content": USER}]})
        partial = "".join(e["delta"]["partial_json"] for e in r.chunks
                          if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta")
        self.assertIsInstance(json.loads(partial)["city"], str)

    def test_count_tokens_is_the_messages_input(self):
        # /v1/messages/count_tokens: what input_tokens a /v1/messages request of the same body reports (its
        # max_tokens optional), with tools and a system prompt; errors in Anthropic's shape.
        for extra in ({}, {"system": "Be brief.", "tools": [TOOL]}):
            with self.subTest(extra=list(extra)):
                m = self.create(**extra)
                body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": USER}], **extra}
                status, obj = self.server.post("/v1/messages/count_tokens", body)
                self.assertEqual(status, 200, obj)
                self.assertEqual(obj, {"input_tokens": m["usage"]["input_tokens"]})
        status, obj = self.server.post("/v1/messages/count_tokens", {"messages": []})
        self.assertEqual(status, 400, obj)
        self.assertEqual(obj["type"], "error", obj)

    def test_stop_sequences(self):
        # seeded draws (the chat endpoint's seed and ignore_eos, which this endpoint takes too): the same text
        # again, up to the stop
        kw = dict(max_tokens=40, ignore_eos=True, temperature=1.0, seed=11)
        free = self.create(**kw)["content"][0]["text"]
        stop = next(free[i:i + 2] for i in range(3, len(free) - 2) if free.index(free[i:i + 2]) == i)
        m = self.create(stop_sequences=[stop], **kw)
        self.assertEqual(m["stop_reason"], "stop_sequence")
        self.assertEqual(m["stop_sequence"], stop)
        self.assertEqual(m["content"][0]["text"], free[:free.index(stop)])

    def test_errors_are_anthropics(self):
        for body, field in (({"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
                            ({"max_tokens": 4, "messages": []}, "messages"),
                            ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
                             "messages[0].content[0].type"),
                            ({"max_tokens": 4, "tools": [{"type": "web_search_20250305", "name": "w"}],
                              "messages": [{"role": "user", "content": "x"}]}, "tools[0]")):
            with self.subTest(field=field):
                status, obj = self.server.post("/v1/messages", body)
                self.assertEqual(status, 400, obj)
                self.assertEqual(obj["type"], "error", obj)
                self.assertEqual(obj["error"]["type"], "invalid_request_error", obj)
                self.assertIn(field.split("[")[0], obj["error"]["message"])
        status, obj = self.server.post("/v1/messages", {"model": "gpt-4", "max_tokens": 4,
                                                        "messages": [{"role": "user", "content": "x"}]})
        self.assertEqual(status, 404, obj)
        self.assertEqual(obj["error"]["type"], "not_found_error")


if __name__ == "__main__":
    unittest.main()

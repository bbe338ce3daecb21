"""/v1/responses (OpenAI's Responses API) through the real openai client: the reply is what /v1/chat/completions gives
for the same conversation (the fixture's byte soup, so the tests compare, never read content); streamed events add
up to the response object, with the same items and ids; reasoning as a reasoning item; a function tool's call as a
function_call item, sent back with its output as the next turn's input; strict tools and text.format enforced;
what is not supported refused with the Responses API's field names."""

import json
import unittest

import openai

import harness

USER = "Weather in Paris?"
TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 3}},
                       "required": ["city"], "additionalProperties": False}}


class ResponsesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.shared_server()
        cls.client = harness.openai_client(cls.server)

    def create(self, **kw):
        kw.setdefault("model", harness.MODEL_NAME)
        kw.setdefault("input", USER)
        kw.setdefault("temperature", 0)
        return self.client.responses.create(**kw)

    def chat(self, **kw):
        kw.setdefault("model", harness.MODEL_NAME)
        kw.setdefault("temperature", 0)
        return self.client.chat.completions.create(**kw)

    def test_text_reply_is_the_chat_reply(self):
        r = self.create(max_output_tokens=12, instructions="Be brief.")
        self.assertTrue(r.id.startswith("resp_"), r.id)
        self.assertEqual(r.object, "response")
        self.assertIn(r.status, ("completed", "incomplete"))
        c = self.chat(max_tokens=12, messages=[{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": USER}])
        self.assertEqual(r.output_text, c.choices[0].message.content)
        self.assertEqual(r.usage.input_tokens, c.usage.prompt_tokens)
        self.assertEqual(r.usage.output_tokens, c.usage.completion_tokens)
        self.assertEqual(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens)
        if c.choices[0].finish_reason == "length":
            self.assertEqual(r.status, "incomplete")
            self.assertEqual(r.incomplete_details.reason, "max_output_tokens")
        self.assertEqual([item.type for item in r.output], ["message"])
        self.assertEqual(r.instructions, "Be brief.")
        # Input items: messages with text parts read as the same conversation.
        items = self.create(max_output_tokens=12, instructions="Be brief.",
                            input=[{"role": "user", "content": [{"type": "input_text", "text": USER}]}])
        self.assertEqual(items.output_text, r.output_text)

    def test_streamed_events_add_up_to_the_response(self):
        kw = dict(max_output_tokens=24, reasoning={"effort": "high"})
        whole = self.create(**kw)
        self.assertEqual(whole.output[0].type, "reasoning", whole.output)
        self.assertGreater(whole.usage.output_tokens_details.reasoning_tokens, 0)
        events = list(self.create(stream=True, **kw))
        types = [e.type for e in events]
        self.assertEqual(types[:2], ["response.created", "response.in_progress"])
        self.assertIn(types[-1], ("response.completed", "response.incomplete"))
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        final = events[-1].response
        reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        self.assertEqual(reasoning, whole.output[0].content[0].text)
        self.assertEqual(text, whole.output_text)
        self.assertEqual(final.output_text, whole.output_text)
        done = [e.item for e in events if e.type == "response.output_item.done"]
        self.assertEqual([i.id for i in done], [i.id for i in final.output])
        self.assertEqual(final.usage.output_tokens, whole.usage.output_tokens)

    def test_function_call_round_trip(self):
        # A strict tool (the Responses API's default): the forced call's arguments are of its schema. Its budget covers
        # the longest call the grammar allows (see harness.TOOL_CALL_BUDGET).
        r = self.create(max_output_tokens=harness.TOOL_CALL_BUDGET, tools=[TOOL], tool_choice="required",
                        parallel_tool_calls=False, temperature=1.0)
        calls = [item for item in r.output if item.type == "function_call"]
        self.assertEqual(r.status, "completed", r)
        self.assertEqual(len(calls), 1, r.output)
        call = calls[0]
        self.assertEqual(call.name, "get_weather")
        args = json.loads(call.arguments)
        self.assertIsInstance(args["city"], str)
        self.assertLessEqual(len(args["city"]), 3)
        # The call and its output go back as the next turn's input: the server renders them (the prompt grows).
        follow = self.create(max_output_tokens=8, tools=[TOOL], input=[
            {"role": "user", "content": USER},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "clear"}'}])
        self.assertGreater(follow.usage.input_tokens, r.usage.input_tokens)
        streamed = list(self.create(max_output_tokens=harness.TOOL_CALL_BUDGET, tools=[TOOL], tool_choice="required",
                                    parallel_tool_calls=False, temperature=1.0, stream=True))
        args_done = [e for e in streamed if e.type == "response.function_call_arguments.done"]
        self.assertEqual(len(args_done), 1)
        self.assertEqual(args_done[0].arguments, streamed[-1].response.output[-1].arguments)

    def test_text_format_json_schema(self):
        schema = {"type": "object", "required": ["ok"], "additionalProperties": False,
                  "properties": {"ok": {"type": "boolean"}}}
        r = self.create(max_output_tokens=300, temperature=1.0,
                        text={"format": {"type": "json_schema", "name": "probe", "schema": schema, "strict": True}})
        if r.status == "completed":
            self.assertIsInstance(json.loads(r.output_text)["ok"], bool)
        self.assertTrue(r.output_text.lstrip().startswith("{"), r.output_text)

    def test_refusals_name_the_responses_fields(self):
        for kw, field in ((dict(previous_response_id="resp_x"), "previous_response_id"),
                          (dict(tools=[{"type": "web_search"}]), "tools[0].type"),
                          (dict(input=[{"type": "item_reference", "id": "x"}]), "input[0].type"),
                          (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]),
                           "input[0].content[0].type"),
                          (dict(max_output_tokens=0), "max_output_tokens"),
                          (dict(text={"format": {"type": "json_schema", "name": "x",
                                                 "schema": {"type": "string", "pattern": "a"}}}),
                           "text.format.schema"),
                          (dict(tools=[{"type": "function", "name": "f", "parameters": {
                              "type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}}]),
                           "tools[0].parameters")):
            with self.subTest(field=field):
                with self.assertRaises(openai.BadRequestError) as cm:
                    self.create(**kw)
                self.assertEqual(cm.exception.body["param"], field, cm.exception.body)


if __name__ == "__main__":
    unittest.main()

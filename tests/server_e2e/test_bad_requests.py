"""Bad requests against every endpoint and every field type: wrong types, out-of-range values, malformed JSON, empty
bodies, unknown paths and methods, oversized bodies (413), missing or wrong API keys (401), unknown models (404), a
prompt longer than the context; each answered with OpenAI's error object, and the server still serves a good
request afterwards. Raw HTTP, so nothing in a client library reshapes the request."""

import json
import unittest

import openai

import harness

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
MESSAGES = [{"role": "user", "content": "Hi"}]

# Fields both endpoints take, each with values that must be refused (400).
COMMON_BAD = {
    "max_tokens": ["10", 0, -1, 1.5, True, [1]],
    "temperature": ["hot", -0.1, 2.5, [0], {}],
    "top_p": ["x", 0, -0.5, 1.5],
    "top_k": ["x", -2, 1.5],
    "min_p": ["x", -0.1, 1.5],
    "seed": ["x", 1.5, [1]],
    "stop": [5, [1], [""], ["a"] * 17, {"a": 1}],
    "n": [17, 0, "1"],
    "stream": ["yes", 1, {}],
    "stream_options": ["x", 5],
    "ignore_eos": ["x", 5],
    "response_format": ["json_object", {}, {"type": 1}, {"type": "yaml"},
                        {"type": "json_schema"}, {"type": "json_schema", "json_schema": {"name": "a"}},
                        {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "string", "pattern": "a"}}},
                        {"type": "json_schema", "json_schema": {"name": "a", "schema": {"$ref": "#/$defs/none"}}}],
    "presence_penalty": [2.5, "x"],
    "frequency_penalty": [-2.5, "x"],
    "repetition_penalty": [0, -1, "x"],
    "logit_bias": [{"5": 101}, {"x": 1}, "x"],
    "model": [5, ["m"]],
}

CHAT_BAD = {
    "messages": ["hi", [], [1], [{"content": "x"}], [{"role": 5, "content": "x"}], {"role": "user"},
                [{"role": "user", "content": 5}],
                [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]],
    "max_completion_tokens": ["10", 0, -3],
    "logprobs": ["yes", 1.5],
    "top_logprobs": [21, -1, "3"],
    "tools": ["x", [5], [{"type": "function"}], [{"type": "code", "function": {"name": "f"}}],
              [{"type": "function", "function": {"description": "no name"}}]],
    "tool_choice": [5, {"type": "function", "function": {"name": "not_a_tool"}}],
    "reasoning_effort": [5, ["high"]],
    "parallel_tool_calls": ["no", 1],
    "modalities": ["text", ["audio"], ["text", "audio"]],
    "audio": [{"voice": "alloy", "format": "wav"}],
}

COMPLETIONS_BAD = {
    "prompt": [5, [], [[1, 2], [[3]]], ["text", ""], ["text", 5], [[1], None], [512], [-1], [1.5], {"a": 1}, "",
               ["x"] * 65],
    "logprobs": ["x", -1, 21, True],
    "echo": ["yes", 1],
    "best_of": [2],
    "suffix": ["tail"],
}


def check_error(test, status, body, expected_status, context):
    test.assertEqual(status, expected_status, f"{context}: {body}")
    test.assertIsInstance(body, dict, f"{context}: the body is not JSON: {body!r}")
    err = body.get("error")
    test.assertIsInstance(err, dict, f"{context}: no error object: {body}")
    test.assertIsInstance(err.get("message"), str, context)
    test.assertTrue(err["message"], context)
    test.assertIsInstance(err.get("type"), str, context)
    test.assertIn("param", err, context)
    test.assertIn("code", err, context)
    return err


class BadRequestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.shared_server()

    def tearDown(self):
        self.assert_still_serving()

    def assert_still_serving(self):
        r = self.server.completion({"prompt": "Still here", "max_tokens": 2, "temperature": 0})
        self.assertEqual(len(r["choices"]), 1)
        r = self.server.chat({"messages": MESSAGES, "max_tokens": 2, "temperature": 0})
        self.assertEqual(r["choices"][0]["message"]["role"], "assistant")

    def check(self, path, body, expected=400, field=None):
        status, obj = self.server.post(path, body)
        err = check_error(self, status, obj, expected, f"{path} {json.dumps(body)[:200]}")
        if field and expected == 400:
            where = (err.get("param") or "") + " " + err["message"]
            self.assertIn(field, where, f"{path} {field}: the error does not name the field: {err}")
        return err

    def check_fields(self, path, good, bad):
        for field, values in bad.items():
            for value in values:
                with self.subTest(path=path, field=field, value=value):
                    body = dict(good)
                    body[field] = value
                    if field == "stream_options":
                        body["stream"] = True
                    self.check(path, body, field=field)

    def test_chat_fields(self):
        good = {"messages": MESSAGES, "max_tokens": 2}
        self.check_fields(CHAT, good, COMMON_BAD)
        self.check_fields(CHAT, good, CHAT_BAD)
        self.check(CHAT, {"max_tokens": 2}, field="messages")
        self.check(CHAT, {"messages": MESSAGES, "max_tokens": 2, "top_logprobs": 2}, field="top_logprobs")
        self.check(CHAT, {"messages": MESSAGES, "max_tokens": 2, "stream_options": {"include_usage": True}},
                   field="stream_options")
        self.check(CHAT, {"messages": MESSAGES, "max_tokens": 2, "response_format": {"type": "json_object"},
                          "tools": [{"type": "function", "function": {"name": "f"}}]}, field="response_format")
        self.check(CHAT, {"messages": MESSAGES, "max_tokens": 2, "tools": [
            {"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function",
                                                                              "function": {"name": "g"}}},
                   field="tool_choice")

    def test_completions_fields(self):
        good = {"prompt": "Hi", "max_tokens": 2}
        self.check_fields(COMPLETIONS, good, COMMON_BAD)
        self.check_fields(COMPLETIONS, good, COMPLETIONS_BAD)
        self.check(COMPLETIONS, {"max_tokens": 2}, field="prompt")

    def test_unknown_model_is_404(self):
        for path, body in ((CHAT, {"messages": MESSAGES}), (COMPLETIONS, {"prompt": "Hi"})):
            body = dict(body, model="no-such-model", max_tokens=2)
            err = self.check(path, body, expected=404)
            self.assertEqual(err.get("code"), "model_not_found", err)
        client = openai.OpenAI(base_url=self.server.base_url, api_key="unused", max_retries=0)
        with self.assertRaises(openai.NotFoundError):
            client.completions.create(model="no-such-model", prompt="Hi", max_tokens=2)

    def test_malformed_bodies(self):
        for path in (CHAT, COMPLETIONS, RESPONSES, "/tokenize", "/detokenize"):
            for body in (b"", b"{", b'{"prompt": "Hi",}', b"[1, 2]", b"null", b'"text"', b"42",
                         b"{" * 1000 + b"}" * 1000, b'{"messages": "\xff\xfe", "prompt": "\xff"}',
                         b'{"prompt": "Hi", "max_tokens": 2} trailing'):
                with self.subTest(path=path, body=body[:40]):
                    status, _, data = self.server.request("POST", path, body)
                    try:
                        obj = json.loads(data)
                    except ValueError:
                        obj = data
                    check_error(self, status, obj, 400, f"{path} {body[:40]!r}")

    def test_context_overflow(self):
        models = json.loads(self.server.request("GET", "/v1/models")[2])
        max_len = models["data"][0].get("max_model_len")
        self.assertIsInstance(max_len, int)
        err = self.check(COMPLETIONS, {"prompt": [5] * 4, "max_tokens": max_len})
        self.assertEqual(err.get("code"), "context_length_exceeded", err)

    def test_unknown_paths_and_methods(self):
        for method, path in (("GET", "/v1/nope"), ("POST", "/v1/nope"), ("GET", "/"), ("POST", "/v2/completions"),
                             ("GET", CHAT), ("GET", COMPLETIONS), ("DELETE", "/v1/models"), ("PUT", CHAT),
                             ("POST", "/v1/models"), ("POST", "/health")):
            with self.subTest(method=method, path=path):
                status, _, data = self.server.request(method, path, b"{}" if method != "GET" else None)
                self.assertIn(status, (404, 405), f"{method} {path}")
                check_error(self, status, json.loads(data), status, f"{method} {path}")


class AuthAndLimitsTest(unittest.TestCase):
    """A server with an API key, a small body limit, a small context, a per-request output limit and its own name."""

    KEY = "sk-e2e-secret"
    NAME = "tiny-e2e"

    @classmethod
    def setUpClass(cls):
        cls.server = harness.Server("--api-key", cls.KEY, "--max-body-bytes", 65536, "--max-context", 256,
                                    "--max-output", 16, "--served-model-name", cls.NAME).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def auth(self, key=None):
        return {"Authorization": f"Bearer {key or self.KEY}"}

    def post(self, path, body, key=None):
        return self.server.post(path, body, headers=self.auth(key))

    def test_api_key(self):
        requests = [("POST", CHAT, {"messages": MESSAGES, "max_tokens": 2}),
                    ("POST", COMPLETIONS, {"prompt": "Hi", "max_tokens": 2}), ("GET", "/v1/models", None),
                    ("POST", RESPONSES, {"input": "Hi", "max_output_tokens": 2}),
                    ("POST", "/tokenize", {"prompt": "Hi"}), ("POST", "/detokenize", {"tokens": [1]})]
        for method, path, body in requests:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": self.KEY},
                            {"Authorization": f"Basic {self.KEY}"}, {"Authorization": f"Bearer {self.KEY}x"}):
                with self.subTest(path=path, headers=headers):
                    status, _, data = self.server.request(method, path, body, headers=headers)
                    err = check_error(self, status, json.loads(data), 401, f"{method} {path} {headers}")
                    self.assertEqual(err["type"], "authentication_error", err)
            status, _, _ = self.server.request(method, path, body, headers=self.auth())
            self.assertEqual(status, 200, f"{method} {path} with the key")
        status, _, _ = self.server.request("GET", "/health")
        self.assertEqual(status, 200, "/health needs no key")
        wrong = openai.OpenAI(base_url=self.server.base_url, api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            wrong.chat.completions.create(model=self.NAME, messages=MESSAGES, max_tokens=2)
        right = openai.OpenAI(base_url=self.server.base_url, api_key=self.KEY, max_retries=0)
        self.assertEqual(right.chat.completions.create(model=self.NAME, messages=MESSAGES, max_tokens=2,
                                                       temperature=0).choices[0].message.role, "assistant")

    def test_body_too_large(self):
        big = {"prompt": "x" * 70000, "max_tokens": 2}
        for path in (CHAT, COMPLETIONS, RESPONSES):
            with self.subTest(path=path):
                status, obj = self.post(path, big)
                check_error(self, status, obj, 413, path)
        status, obj = self.post(COMPLETIONS, {"prompt": "Hi", "max_tokens": 2, "temperature": 0})
        self.assertEqual(status, 200, obj)

    def test_served_model_name(self):
        models = json.loads(self.server.request("GET", "/v1/models", headers=self.auth())[2])
        self.assertEqual([m["id"] for m in models["data"]], [self.NAME])
        self.assertEqual(models["data"][0].get("max_model_len"), 256)
        status, obj = self.post(COMPLETIONS, {"model": self.NAME, "prompt": "Hi", "max_tokens": 2})
        self.assertEqual(status, 200, obj)
        self.assertEqual(obj["model"], self.NAME)
        status, obj = self.post(COMPLETIONS, {"model": harness.MODEL_NAME, "prompt": "Hi", "max_tokens": 2})
        check_error(self, status, obj, 404, "the directory's name is not the served name")

    def test_context_limit(self):
        for prompt, max_tokens in (([5] * 300, 1), ([5] * 256, 1), ([5] * 250, 10)):
            with self.subTest(prompt=len(prompt), max_tokens=max_tokens):
                status, obj = self.post(COMPLETIONS, {"prompt": prompt, "max_tokens": max_tokens})
                err = check_error(self, status, obj, 400, f"{len(prompt)} prompt tokens, max_tokens {max_tokens}")
                self.assertEqual(err.get("code"), "context_length_exceeded", err)
        # Several prompts: the one that does not fit refuses the request, named by its index.
        status, obj = self.post(COMPLETIONS, {"prompt": [[5] * 10, [5] * 300], "max_tokens": 1})
        err = check_error(self, status, obj, 400, "the second of two prompts over the context")
        self.assertEqual((err.get("code"), err.get("param")), ("context_length_exceeded", "prompt[1]"), err)
        status, obj = self.post(CHAT, {"messages": [{"role": "user", "content": "y" * 400}], "max_tokens": 1})
        err = check_error(self, status, obj, 400, "a chat prompt over the context")
        self.assertEqual(err.get("code"), "context_length_exceeded", err)
        status, obj = self.post(COMPLETIONS, {"prompt": [5] * 240, "max_tokens": 16, "temperature": 0,
                                              "ignore_eos": True})
        self.assertEqual(status, 200, obj)
        self.assertEqual(obj["usage"]["completion_tokens"], 16)

    def test_output_limit(self):
        status, obj = self.post(COMPLETIONS, {"prompt": "Hi", "max_tokens": 17})
        err = check_error(self, status, obj, 400, "max_tokens above --max-output 16")
        self.assertIn("max_tokens", (err.get("param") or "") + err["message"])
        status, obj = self.post(COMPLETIONS, {"prompt": "Hi", "temperature": 0, "ignore_eos": True})
        self.assertEqual(status, 200, obj)
        self.assertEqual(obj["usage"]["completion_tokens"], 16, "without max_tokens --max-output bounds the reply")


if __name__ == "__main__":
    unittest.main()

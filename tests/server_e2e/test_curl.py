"""The server through the curl binary, as people try it first: the raw SSE framing of a streaming chat and a
streaming completion (`data: {json}` events separated by blank lines, `data: [DONE]` last, text/event-stream), a
plain request and an error. curl is required (scripts/setup.sh installs it): a missing one fails, never skips."""

import json
import shutil
import subprocess
import unittest

import harness


def curl(*args, data=None):
    exe = shutil.which("curl")
    if exe is None:
        raise AssertionError("the curl binary is not installed (scripts/setup.sh installs it)")
    cmd = [exe, "-sS", "--max-time", "120", *args]
    if data is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    out = subprocess.run(cmd, input=json.dumps(data).encode() if data is not None else None, capture_output=True,
                         timeout=150)
    if out.returncode != 0:
        raise AssertionError(f"{cmd} exited {out.returncode}: {out.stderr.decode()}")
    return out.stdout


def split_response(raw):
    """curl -i output -> (status, headers dict, body bytes)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return status, headers, body


class CurlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.shared_server()

    def check_sse(self, body):
        """Raw SSE framing -> the parsed chunks (without [DONE])."""
        text = body.decode("utf-8")
        self.assertTrue(text.endswith("data: [DONE]\n\n"), f"the stream must end with 'data: [DONE]': {text[-200:]!r}")
        events = text[:-2].split("\n\n")
        self.assertEqual(events[-1], "data: [DONE]")
        chunks = []
        for event in events[:-1]:
            self.assertTrue(event.startswith("data: "), f"an event that is not 'data: ...': {event!r}")
            self.assertNotIn("\n", event, "one line per event")
            chunks.append(json.loads(event[len("data: "):]))
        self.assertGreaterEqual(len(chunks), 2)
        return chunks

    def test_streaming_chat_framing(self):
        body = {"model": harness.MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        status, headers, raw = split_response(curl("-N", "-i", self.server.base_url + "/chat/completions",
                                                   data=body))
        self.assertEqual(status, 200)
        self.assertTrue(headers.get("content-type", "").startswith("text/event-stream"), headers)
        chunks = self.check_sse(raw)
        self.assertEqual(chunks[0]["choices"][0]["delta"].get("role"), "assistant")
        self.assertEqual(chunks[-1]["choices"], [])
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 10)
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], "length")
        streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
        plain = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        whole = json.loads(curl(self.server.base_url + "/chat/completions", data=plain))
        self.assertEqual(streamed, whole["choices"][0]["message"]["content"])

    def test_streaming_completion_framing(self):
        body = {"prompt": "Once upon a ", "max_tokens": 12, "temperature": 0, "stream": True, "ignore_eos": True}
        chunks = self.check_sse(curl("-N", self.server.base_url + "/completions", data=body))
        self.assertTrue(all(c["object"] == "text_completion" for c in chunks))
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")
        whole = json.loads(curl(self.server.base_url + "/completions", data=dict(body, stream=False)))
        self.assertEqual("".join(c["choices"][0]["text"] for c in chunks), whole["choices"][0]["text"])

    def test_plain_and_error(self):
        models = json.loads(curl(self.server.base_url + "/models"))
        self.assertEqual(models["data"][0]["id"], harness.MODEL_NAME)
        status, headers, raw = split_response(curl("-i", self.server.base_url + "/completions",
                                                   data={"prompt": "Hi", "max_tokens": "many"}))
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(raw)["error"]["param"], "max_tokens")
        status, _, raw = split_response(curl("-i", self.server.url + "/health"))
        self.assertEqual(status, 200)
        self.assertIn("dsv4_requests_running ", curl(self.server.url + "/metrics").decode())


if __name__ == "__main__":
    unittest.main()

"""Harness of the end-to-end server tests: starts `dsv4 serve` as a subprocess on a free port, waits for /health 200,
stops it with SIGTERM (and checks it exits 0), and offers raw HTTP helpers (JSON, SSE, Prometheus text) beside the
openai client. Standard library only. run_tests.py sets DSV4_BIN / DSV4_MODEL / DSV4_BACKEND before the tests import
this module."""

import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time

DSV4_BIN = os.environ.get("DSV4_BIN", "")
MODEL_DIR = os.environ.get("DSV4_MODEL", "")
BACKEND = os.environ.get("DSV4_BACKEND", "cpu")
MODEL_NAME = os.path.basename(os.path.normpath(MODEL_DIR)) if MODEL_DIR else ""

# The longest forced call of one strict tool with a 3-character string argument (test_messages' and test_responses'
# TOOL) that the grammar allows, in this fixture's tokens, which may be single bytes: a 177-byte scaffold, the value's
# quotes and 3 characters of up to 12 bytes each (an escaped surrogate pair), up to 24 whitespace bytes on each side of
# it, and the end token: 264. A smaller budget cuts off calls sampled (temperature 1) with long whitespace or escapes.
TOOL_CALL_BUDGET = 320

_LISTENING = re.compile(r"dsv4 serve: listening on http://([^:\s]+):(\d+)")


class Server:
    """One `dsv4 serve` process. Use as a context manager or call start() / stop()."""

    def __init__(self, *extra_args, start_timeout=120.0):
        if not DSV4_BIN or not MODEL_DIR:
            raise RuntimeError("DSV4_BIN and DSV4_MODEL must be set (run the tests through run_tests.py)")
        self.args = [DSV4_BIN, "serve", "-m", MODEL_DIR, "--port", "0", "--backend", BACKEND, *map(str, extra_args)]
        self.start_timeout = start_timeout
        self.proc = None
        self.port = None
        self.host = "127.0.0.1"
        self._stderr = []
        self._stderr_lock = threading.Lock()
        self._listening = threading.Event()

    # -- life cycle --

    def start(self):
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        threading.Thread(target=self._read_stderr, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._fail_start("never printed 'dsv4 serve: listening on ...'")
        while True:  # /health says 503 while the model loads, 200 once it is ready
            try:
                status, _, _ = self.request("GET", "/health", timeout=5)
                if status == 200:
                    return self
                if status != 503:
                    self._fail_start(f"/health answered {status} (expected 503 while loading, then 200)")
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._fail_start("/health never answered 200")
            time.sleep(0.05)

    def _fail_start(self, why):
        self.kill()
        raise AssertionError(f"`{' '.join(self.args)}` {why}; stderr:\n{self.stderr()}")

    def _read_stderr(self):
        for line in self.proc.stderr:
            with self._stderr_lock:
                self._stderr.append(line)
            m = _LISTENING.search(line)
            if m and not self._listening.is_set():
                self.host, self.port = m.group(1), int(m.group(2))
                self._listening.set()

    def stderr(self):
        with self._stderr_lock:
            return "".join(self._stderr[-200:])

    def stop(self, timeout=15.0):
        """SIGTERM (drain), then the process must exit 0 within `timeout` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"dsv4 serve did not exit within {timeout} s of SIGTERM; stderr:\n{self.stderr()}")
        if rc != 0:
            raise AssertionError(f"dsv4 serve exited {rc} after SIGTERM (expected 0); stderr:\n{self.stderr()}")
        return rc

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if exc[0] is None:
            self.stop()
        else:
            self.kill()

    # -- HTTP --

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self):
        return self.url + "/v1"

    def connection(self, timeout=120.0):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120.0):
        """One request on a fresh connection -> (status, headers dict with lower-case names, body bytes).
        `body`: bytes / str sent as is, anything else as JSON."""
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        conn = self.connection(timeout)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def post(self, path, body, headers=None, timeout=120.0):
        """POST -> (status, parsed JSON body or None when it is not JSON)."""
        status, _, data = self.request("POST", path, body, headers, timeout)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, None

    def completion(self, body, **kw):
        """POST /v1/completions that must succeed -> the response object."""
        status, obj = self.post("/v1/completions", body, **kw)
        if status != 200:
            raise AssertionError(f"/v1/completions {json.dumps(body)[:300]} -> {status} {obj}")
        return obj

    def chat(self, body, **kw):
        status, obj = self.post("/v1/chat/completions", body, **kw)
        if status != 200:
            raise AssertionError(f"/v1/chat/completions {json.dumps(body)[:300]} -> {status} {obj}")
        return obj

    def stream(self, path, body, headers=None, close_after=None, timeout=120.0):
        """POST a streaming request and read its SSE events -> StreamResult. close_after=k closes the connection
        after k data events (a client going away mid-stream)."""
        result = StreamResult()
        conn = self.connection(timeout)
        try:
            hdrs = {"Content-Type": "application/json"}
            hdrs.update(headers or {})
            conn.request("POST", path, body=json.dumps(body).encode(), headers=hdrs)
            resp = conn.getresponse()
            result.status = resp.status
            result.content_type = resp.getheader("Content-Type", "")
            if resp.status != 200:
                result.error = resp.read()
                return result
            for event in iter_sse(resp):
                if event == "[DONE]":
                    result.done = True
                    result.after_done = resp.read()
                    break
                result.chunks.append(json.loads(event))
                if close_after is not None and len(result.chunks) >= close_after:
                    result.closed_early = True
                    break
            return result
        finally:
            if result.closed_early:  # shut the socket down so the server sees the close at its next write
                try:
                    conn.sock.shutdown(2)
                except OSError:
                    pass
            conn.close()

    def metrics(self):
        status, headers, data = self.request("GET", "/metrics")
        if status != 200:
            raise AssertionError(f"/metrics -> {status}")
        return Metrics(data.decode())


class StreamResult:
    def __init__(self):
        self.status = None
        self.content_type = ""
        self.error = None
        self.chunks = []
        self.done = False
        self.closed_early = False
        self.after_done = b""

    def finish_reasons(self):
        return [c["finish_reason"] for ch in self.chunks for c in ch.get("choices", []) if c.get("finish_reason")]

    def text(self):
        """Completions: the concatenated `text` of every chunk."""
        return "".join(c.get("text", "") for ch in self.chunks for c in ch.get("choices", []))

    def delta(self, key):
        """Chat: the concatenated delta field `key` (content or reasoning_content)."""
        return "".join((c.get("delta", {}).get(key) or "") for ch in self.chunks for c in ch.get("choices", []))

    def usage(self):
        usages = [ch["usage"] for ch in self.chunks if ch.get("usage")]
        return usages[-1] if usages else None


def iter_sse(resp):
    """The data of each server-sent event of an http.client response (events are blank-line separated; each of
    ours is one `data: ` line, after an `event: TYPE` line on /v1/responses and /v1/messages, whose TYPE must be the
    data's "type")."""
    lines = []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line:
            lines.append(line)
            continue
        if lines:
            named = lines[0][len("event: "):] if lines[0].startswith("event: ") else None
            if named is not None:
                lines = lines[1:]
            data = [ln[len("data: "):] for ln in lines if ln.startswith("data: ")]
            if len(data) != len(lines) or not data:
                raise AssertionError(f"SSE event with a line that is not 'data: ...': {lines}")
            if named is not None and json.loads("\n".join(data)).get("type") != named:
                raise AssertionError(f"SSE event named {named!r} holds another type: {data}")
            lines = []
            yield "\n".join(data)


class Metrics:
    """Prometheus text format: samples by their full name with labels as printed, e.g.
    m['dsv4_requests_total{finish_reason="stop"}'], and the # TYPE of each family."""

    _SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\d+)?$')

    def __init__(self, text):
        self.text = text
        self.samples = {}
        self.types = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(None, 3)
                self.types[name] = kind.strip()
                continue
            if line.startswith("#"):
                continue
            m = self._SAMPLE.match(line)
            if not m:
                raise AssertionError(f"/metrics line is not a Prometheus sample: {line!r}")
            key = m.group(1) + (m.group(2) or "")
            if key in self.samples:
                raise AssertionError(f"/metrics repeats the sample {key}")
            self.samples[key] = float(m.group(3))

    def __getitem__(self, key):
        if key not in self.samples:
            raise AssertionError(f"/metrics has no sample {key}; it has: {sorted(self.samples)}")
        return self.samples[key]

    def get(self, key, default=None):
        return self.samples.get(key, default)

    def buckets(self, name):
        """[(le, cumulative count)] of histogram `name`, in the order printed."""
        out = []
        for key, value in self.samples.items():
            m = re.fullmatch(re.escape(name) + r'_bucket\{le="([^"]+)"\}', key)
            if m:
                out.append((float(m.group(1)), value))
        return out


def byte_token_ids(text, bos=True):
    """The fixture's token ids of `text`: its tokenizer is byte-level without merges, so each byte is one token
    (id = vocabulary index of the byte's GPT-2 character), after BOS = 0 as the server adds to text prompts."""
    vocab = _vocab()
    ids = [vocab[_BYTE_CHARS[b]] for b in text.encode()]
    return ([0] if bos else []) + ids


_BYTE_CHARS = None
_VOCAB = None


def _vocab():
    global _VOCAB, _BYTE_CHARS
    if _VOCAB is None:
        with open(os.path.join(MODEL_DIR, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        if tok["model"].get("merges"):
            raise AssertionError("byte_token_ids assumes a tokenizer without merges (the trained-bytes fixture)")
        _VOCAB = tok["model"]["vocab"]
        # GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the rest map to 256 + n.
        keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        chars, n = {}, 0
        for b in range(256):
            if b in keep:
                chars[b] = chr(b)
            else:
                chars[b] = chr(256 + n)
                n += 1
        _BYTE_CHARS = chars
    return _VOCAB


def wait_for(predicate, timeout=30.0, interval=0.05):
    """Polls predicate() until it returns a true value (returned) or `timeout` passes (the last value returned)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


_shared = None


def shared_server():
    """One default server shared by the test modules that need no special flags; run_tests.py stops it at the end
    (and checks it exits 0)."""
    global _shared
    if _shared is None:
        _shared = Server().start()
    return _shared


def openai_client(server, api_key="unused"):
    """The openai SDK's client on `server`: no retries (a failure must show), a generous timeout for the CPU."""
    import openai  # only the tests that use the SDK need it; run_tests.py checks it is installed

    return openai.OpenAI(base_url=server.base_url, api_key=api_key, max_retries=0, timeout=120)


def stop_shared_server():
    global _shared
    if _shared is not None:
        server, _shared = _shared, None
        server.stop()

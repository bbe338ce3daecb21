// The generation options of a chat or completion request (openai_protocol.h's GenerationOptions): sampling,
// penalties and biases, stop strings, logprobs, structured output, and vLLM's extras. Used by the request parsers;
// tested through tests/server/openai_protocol_test.cpp.
#pragma once

#include "server/openai_protocol.h"
#include "server/request_fields.h"

namespace dsv4::server {

// `chat`: the chat endpoint's fields; else the completion endpoint's (`echo` scores the prompt).
GenerationOptions parse_options(const Fields& f, const RequestLimits& limits, bool chat, bool echo = false);

}  // namespace dsv4::server

// libFuzzer target for what a client sends `dsv4 serve`: any request body must parse into a chat or completion
// request or be refused with an ApiError (the 400 / 404 the server returns), and the messages of a chat request
// that parsed must render into a prompt or be refused with dsv4::Error (what the DeepSeek-V4 encoder refuses): no
// other exception, no crash, no undefined behaviour, whatever the bytes. The first byte picks the endpoint, the
// encoder era and the thinking mode; the rest is the body. Built with -DDSV4_FUZZ=ON (clang); seeds in
// tests/fuzz/corpus/openai_request, see README.md.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "server/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t mode = data[0];
    const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
    dsv4::server::RequestLimits limits;
    limits.max_context = 4096;
    limits.vocab_size = 129280;
    try {
        const dsv4::server::ordered_json json = dsv4::server::parse_json_body(body);
        if (mode & 1) {
            dsv4::server::parse_completion_request(json, limits, "served");
            return 0;
        }
        dsv4::server::ChatRequest request = dsv4::server::parse_chat_request(json, limits, "served");
        if (mode & 2) request.render.era = dsv4::tok::EncoderEra::kPreview;  // the default is 0731
        try {
            const std::string prompt = dsv4::tok::render_prompt(request.messages, request.render);
            (void)prompt;
        } catch (const dsv4::Error&) {
        }
    } catch (const dsv4::server::ApiError&) {
    }
    return 0;
}

// dsv4 logits: feeds token ids through one sequence, chunk by chunk, and writes the logits after every
// position to a safetensors file (tensor "logits", F32 [n_ids, vocab]). Tested in tests/tools/.
#include <fmt/format.h>

#include <numeric>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "io/safetensors_writer.h"

namespace dsv4::cli {
namespace {

std::vector<int64_t> parse_chunks(const std::string& text, int64_t total) {
    std::vector<int64_t> chunks;
    if (text.empty()) return {total};
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        std::optional<int64_t> v = parse_integer(item);
        DSV4_CHECK(v && *v > 0, "--chunks: '{}' is not a positive chunk size", item);
        chunks.push_back(*v);
    }
    const int64_t sum = std::accumulate(chunks.begin(), chunks.end(), int64_t{0});
    DSV4_CHECK(sum == total, "--chunks add up to {} but the ids file holds {} ids: they must be equal", sum, total);
    return chunks;
}

}  // namespace

void add_logits_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("logits", "Write the logits after every input position to a safetensors file");
    auto options = std::make_shared<ModelOptions>();
    auto ids_file = std::make_shared<std::string>();
    auto chunks = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    add_model_options(cmd, *options);
    cmd->add_option("--ids-file", *ids_file, "File of whitespace-separated token ids")->required();
    cmd->add_option("--chunks", *chunks, "Comma-separated chunk sizes summing to the number of ids (default: one)");
    cmd->add_option("--out", *out, "Output .safetensors file")->required();
    cmd->callback([=] {
        start_ranks_or_exit(*options);
        std::vector<int32_t> ids = read_ids_file(*ids_file);
        std::vector<int64_t> schedule = parse_chunks(*chunks, int64_t(ids.size()));
        options->auto_chunk = true;
        auto model = load_model(*options);
        const int64_t vocab = model->config().vocab_size;
        std::vector<float> logits;
        logits.reserve(ids.size() * static_cast<size_t>(vocab));
        SequenceState state = model->new_sequence();
        int64_t offset = 0;
        for (int64_t n : schedule) {
            std::vector<float> part = model->forward(state, std::span(ids).subspan(static_cast<size_t>(offset), static_cast<size_t>(n)), true);
            logits.insert(logits.end(), part.begin(), part.end());
            offset += n;
        }
        write_safetensors(*out, {{"logits", DType::kF32, {int64_t(ids.size()), vocab}, logits.data(),
                                  logits.size() * sizeof(float)}},
                          {{"numerics", numerics_name(model->numerics())}});
        if (!options->quiet)
            std::fprintf(stderr, "dsv4: wrote logits [%zu, %lld] to %s\n", ids.size(), (long long)vocab, out->c_str());
    });
}

}  // namespace dsv4::cli

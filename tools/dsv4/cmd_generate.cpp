// dsv4 generate: prefill the prompt ids, then decode up to -n tokens (stopping at EOS) with greedy or seeded
// sampling. --print-ids prints the generated ids on one line of stdout. Tested in tests/tools/.
#include <cstdio>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "runtime/sampler.h"

namespace dsv4::cli {

void add_generate_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("generate", "Generate tokens after a prompt");
    auto options = std::make_shared<ModelOptions>();
    auto ids_file = std::make_shared<std::string>();
    auto max_new = std::make_shared<int64_t>(32);
    auto sampling = std::make_shared<SamplingParams>();
    auto greedy = std::make_shared<bool>(false);
    auto print_ids = std::make_shared<bool>(false);
    add_model_options(cmd, *options);
    cmd->add_option("--ids-file", *ids_file, "Prompt as a file of whitespace-separated token ids")->required();
    cmd->add_option("-n,--max-new-tokens", *max_new, "Most tokens to generate")->check(CLI::PositiveNumber);
    cmd->add_flag("--greedy", *greedy, "Argmax decoding (the default unless --temp is given)");
    auto* temp = cmd->add_option("--temp", sampling->temperature, "Sampling temperature");
    cmd->add_option("--top-p", sampling->top_p, "Nucleus sampling mass");
    cmd->add_option("--top-k", sampling->top_k, "Keep only the k most likely tokens (0: all)");
    cmd->add_option("--seed", sampling->seed, "Random seed for sampling");
    cmd->add_flag("--print-ids", *print_ids, "Print the generated ids, space-separated, on one line");
    cmd->callback([=] {
        DSV4_CHECK(!(*greedy && temp->count() > 0), "--greedy and --temp contradict each other: give one");
        SamplingParams params = *sampling;
        params.greedy = *greedy || temp->count() == 0;
        Sampler sampler(params);
        std::vector<int32_t> prompt = read_ids_file(*ids_file);
        auto model = load_model(*options);
        const ModelConfig& config = model->config();
        DSV4_CHECK(int64_t(prompt.size()) + *max_new <= config.max_position_embeddings,
                   "prompt ({} ids) plus -n {} exceeds the model's context of {} positions", prompt.size(), *max_new,
                   config.max_position_embeddings);

        SequenceState state = model->new_sequence();
        std::vector<float> logits = model->forward(state, prompt, false);
        std::vector<int32_t> generated;
        for (int64_t i = 0; i < *max_new; ++i) {
            int32_t next = sampler.sample(logits.data(), config.vocab_size);
            generated.push_back(next);
            if (next == config.eos_token_id || i + 1 == *max_new) break;
            logits = model->forward(state, std::span(&next, 1), false);
        }
        if (*print_ids) {
            for (size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? " " : "", generated[i]);
            std::printf("\n");
        }
    });
}

}  // namespace dsv4::cli

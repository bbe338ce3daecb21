// dsv4 tokenize -m DIR (--text T | --file F): token ids, space-separated on one line, no BOS added.
// dsv4 detokenize -m DIR (--ids ID... | --ids-file F) [--skip-special]: the text, written exactly (no newline).
// dsv4 render -m DIR --messages FILE.json [--thinking] [--effort E] [--encoder preview|0731]
//     [--keep-thinking] [--print-ids]: the DeepSeek-V4 prompt string, exactly (no newline), or its ids.
// The tokenizer of DIR is DIR/tokenizer.json, else the installed one (scripts/setup.sh). Library tests:
// tests/tokenizer/.
#include "cmd_text.h"
#include "common.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_path.h"

namespace dsv4::cli {
namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    DSV4_CHECK(in.good(), "cannot open {}", path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

tok::Tokenizer load_tokenizer(const std::string& model_dir) {
    return tok::Tokenizer::from_file(tok::find_tokenizer_json(model_dir));
}

void print_ids(const std::vector<int32_t>& ids) {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
}

// Ids given as arguments may also be one quoted list: "1 2 3" or "1,2,3".
std::vector<int32_t> parse_ids(const std::vector<std::string>& args) {
    std::vector<int32_t> ids;
    for (std::string a : args) {
        for (char& c : a)
            if (c == ',' || c == '[' || c == ']') c = ' ';
        std::istringstream in(a);
        for (std::string word; in >> word;) {
            std::optional<int64_t> v = parse_integer(word);
            DSV4_CHECK(v && *v >= 0 && *v <= INT32_MAX, "'{}' is not a token id", word);
            ids.push_back(static_cast<int32_t>(*v));
        }
    }
    return ids;
}

void write_exact(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

void add_tokenize(CLI::App& app) {
    auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (no BOS added), space-separated");
    auto dir = std::make_shared<std::string>();
    auto text = std::make_shared<std::string>();
    auto file = std::make_shared<std::string>();
    cmd->add_option("-m,--model", *dir, "Model directory (its tokenizer.json, else the installed one)");
    auto* t = cmd->add_option("--text", *text, "Text to tokenize");
    auto* f = cmd->add_option("--file", *file, "File whose bytes are tokenized");
    t->excludes(f);
    cmd->callback([=] {
        DSV4_CHECK(!text->empty() || !file->empty() || t->count() > 0, "give --text or --file");
        const auto tokenizer = load_tokenizer(*dir);
        print_ids(tokenizer.encode(file->empty() ? *text : read_file(*file)));
    });
}

void add_detokenize(CLI::App& app) {
    auto* cmd = app.add_subcommand("detokenize", "Print the text of token ids (exactly, without a newline)");
    auto dir = std::make_shared<std::string>();
    auto ids = std::make_shared<std::vector<std::string>>();
    auto ids_file = std::make_shared<std::string>();
    auto skip = std::make_shared<bool>(false);
    cmd->add_option("-m,--model", *dir, "Model directory (its tokenizer.json, else the installed one)");
    auto* i = cmd->add_option("--ids", *ids, "Token ids (separate arguments, or one list: \"1 2 3\" / 1,2,3)");
    auto* f = cmd->add_option("--ids-file", *ids_file, "File of whitespace-separated token ids");
    i->excludes(f);
    cmd->add_flag("--skip-special", *skip, "Leave out special tokens (BOS, EOS, ...)");
    cmd->callback([=] {
        DSV4_CHECK(!ids->empty() || !ids_file->empty(), "give --ids or --ids-file");
        const auto tokenizer = load_tokenizer(*dir);
        const auto list = ids_file->empty() ? parse_ids(*ids) : parse_ids({read_file(*ids_file)});
        write_exact(tokenizer.decode(list, *skip));
    });
}

void add_render(CLI::App& app) {
    auto* cmd = app.add_subcommand("render", "Print the DeepSeek-V4 prompt of a conversation (exactly, no newline)");
    struct Args {
        std::string dir, messages, effort, encoder = "0731";
        bool thinking = false, keep_thinking = false, print_ids = false;
    };
    auto a = std::make_shared<Args>();
    cmd->add_option("-m,--model", a->dir, "Model directory (for --print-ids: its tokenizer)");
    cmd->add_option("--messages", a->messages,
                    "JSON file: an array of OpenAI-style messages, or {\"messages\": [...], \"tools\": [...]} "
                    "(tools are attached to the first message, as the official encoder's tests do)")
        ->required();
    cmd->add_flag("--thinking", a->thinking, "Thinking mode (default: chat mode)");
    cmd->add_option("--effort", a->effort, "Reasoning effort as the encoder takes it (0731: low|high|max; preview: high|max)");
    cmd->add_option("--encoder", a->encoder, "Encoder era: preview or 0731")->check(CLI::IsMember({"preview", "0731"}));
    cmd->add_flag("--keep-thinking", a->keep_thinking, "drop_thinking=False: keep the reasoning of earlier turns");
    cmd->add_flag("--print-ids", a->print_ids, "Print the token ids of the prompt instead of the text");
    cmd->callback([=] {
        tok::ordered_json doc;
        try {
            doc = tok::ordered_json::parse(read_file(a->messages));
        } catch (const tok::ordered_json::parse_error& e) {
            fail("{} is not valid JSON: {}", a->messages, e.what());
        }
        tok::ordered_json messages = doc.is_object() && doc.contains("messages") ? doc.at("messages") : doc;
        if (doc.is_object() && doc.contains("tools")) {
            DSV4_CHECK(messages.is_array() && !messages.empty(), "{}: tools need at least one message", a->messages);
            messages[0]["tools"] = doc.at("tools");
        }
        tok::RenderOptions opt;
        opt.thinking_mode = a->thinking ? tok::ThinkingMode::kThinking : tok::ThinkingMode::kChat;
        if (!a->effort.empty()) opt.reasoning_effort = a->effort;
        opt.era = tok::parse_encoder_era(a->encoder);
        opt.drop_thinking = !a->keep_thinking;
        const std::string prompt = tok::render_prompt(messages, opt);
        if (a->print_ids)
            print_ids(load_tokenizer(a->dir).encode(prompt));
        else
            write_exact(prompt);
    });
}

}  // namespace

void add_text_commands(CLI::App& app) {
    add_tokenize(app);
    add_detokenize(app);
    add_render(app);
}

}  // namespace dsv4::cli

// Exactness against HF tokenizers without Python: the ids of every document of the 1.15 MB corpus
// (tests/tokenizer/data/corpus.jsonl, from tools/tokenizer/make_corpus.py) must match the per-document counts
// and FNV-1a hashes that tools/tokenizer/compare_hf.py took from HF tokenizers; plus decode round trips.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace dsv4::tok {
namespace {

using test::data_path;
using test::read_file;

struct Corpus {
    std::vector<std::string> kind, text;
};

Corpus load_corpus() {
    Corpus c;
    std::istringstream in(read_file(data_path("corpus.jsonl")));
    for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line);
        c.kind.push_back(j.at("kind").get<std::string>());
        c.text.push_back(j.at("text").get<std::string>());
    }
    return c;
}

std::string ids_hash(const std::vector<int32_t>& ids) {
    std::string le;
    for (int32_t id : ids)
        for (int k = 0; k < 4; ++k) le.push_back(static_cast<char>((static_cast<uint32_t>(id) >> (8 * k)) & 0xFF));
    return fmt::format("{:016x}", test::fnv1a(le.data(), le.size()));
}

TEST(CorpusGolden, IdsMatchHfTokenizers) {
    const auto golden = nlohmann::json::parse(read_file(data_path("corpus_golden.json")));
    const std::string corpus_bytes = read_file(data_path("corpus.jsonl"));
    ASSERT_EQ(fmt::format("{:016x}", test::fnv1a(corpus_bytes.data(), corpus_bytes.size())),
              golden.at("corpus_fnv1a").get<std::string>())
        << "corpus.jsonl changed: regenerate the golden with tools/tokenizer/compare_hf.py --write-golden";
    const auto path = installed_tokenizer_json();
    ASSERT_TRUE(path) << "run scripts/setup.sh";
    const std::string tok_bytes = read_file(path->string());
    ASSERT_EQ(fmt::format("{:016x}", test::fnv1a(tok_bytes.data(), tok_bytes.size())),
              golden.at("tokenizer_fnv1a").get<std::string>())
        << path->string() << " is not the tokenizer.json the golden was made with";

    const Corpus c = load_corpus();
    const auto& doc_ids = golden.at("doc_ids");
    ASSERT_EQ(c.text.size(), doc_ids.size());
    const Tokenizer& tok = test::v4_tokenizer();
    size_t bad = 0, total_ids = 0, total_bytes = 0;
    for (size_t i = 0; i < c.text.size(); ++i) {
        const auto ids = tok.encode(c.text[i]);
        total_ids += ids.size();
        total_bytes += c.text[i].size();
        if (ids.size() != doc_ids[i][0].get<size_t>() || ids_hash(ids) != doc_ids[i][1].get<std::string>()) {
            if (++bad <= 5) ADD_FAILURE() << "document " << i << " (" << c.kind[i] << ") differs from HF";
        }
    }
    for (const auto& [index, sample] : golden.at("samples").items()) {
        const auto ids = tok.encode(c.text[std::stoul(index)]);
        const auto want = sample.get<std::vector<int32_t>>();
        ASSERT_GE(ids.size(), want.size());
        EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + want.size()), want) << "sample " << index;
    }
    std::printf("corpus: %zu documents, %zu bytes, %zu ids, %zu differ from HF tokenizers\n", c.text.size(),
                total_bytes, total_ids, bad);
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(total_ids, golden.at("ids").get<size_t>());
}

TEST(CorpusGolden, DecodeRoundTripsAndStreamsIdentically) {
    const Corpus c = load_corpus();
    const Tokenizer& tok = test::v4_tokenizer();
    size_t bad_round_trip = 0, bad_stream = 0;
    for (const std::string& text : c.text) {
        const auto ids = tok.encode(text);
        bad_round_trip += tok.decode(ids) != text;
        IncrementalDecoder dec(tok);
        std::string streamed;
        for (int32_t id : ids) {
            const std::string piece = dec.push(id);
            EXPECT_TRUE(is_valid_utf8(piece));
            streamed += piece;
        }
        streamed += dec.finish();
        bad_stream += streamed != text;
    }
    EXPECT_EQ(bad_round_trip, 0u);
    EXPECT_EQ(bad_stream, 0u);
}

}  // namespace
}  // namespace dsv4::tok

// Tokenizer throughput on the test corpus (tests/tokenizer/data/corpus.jsonl), one thread: encode MB/s (cache
// warm, and emptied before each pass) and decode MB/s. With --dump-ids OUT it instead writes the ids of every corpus document (one line each) for
// tools/tokenizer/compare_hf.py, which checks them against HF tokenizers.
// Usage: dsv4_bench_tokenizer [--corpus F] [--tokenizer T] [--dump-ids OUT] [benchmark flags]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_path.h"

namespace {

std::vector<std::string> read_corpus(const std::string& path) {
    std::ifstream in(path);
    DSV4_CHECK(in.good(), "cannot open corpus {}", path);
    std::vector<std::string> docs;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) docs.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    return docs;
}

const dsv4::tok::Tokenizer* g_tokenizer = nullptr;
const std::vector<std::string>* g_docs = nullptr;

// state.range(0) == 1: the piece cache is emptied before every pass (a first, cold pass over the corpus).
void BM_Encode(benchmark::State& state) {
    size_t bytes = 0, ids = 0;
    for (auto _ : state) {
        if (state.range(0)) {
            state.PauseTiming();
            g_tokenizer->clear_cache();
            state.ResumeTiming();
        }
        for (const std::string& d : *g_docs) {
            auto v = g_tokenizer->encode(d);
            ids += v.size();
            bytes += d.size();
            benchmark::DoNotOptimize(v.data());
        }
    }
    state.SetBytesProcessed(static_cast<int64_t>(bytes));
    state.counters["ids_per_byte"] = static_cast<double>(ids) / static_cast<double>(bytes);
}

void BM_Decode(benchmark::State& state) {
    std::vector<std::vector<int32_t>> all;
    for (const std::string& d : *g_docs) all.push_back(g_tokenizer->encode(d));
    size_t bytes = 0, mismatched = 0;
    for (auto _ : state) {
        for (size_t i = 0; i < all.size(); ++i) {
            std::string s = g_tokenizer->decode(all[i]);
            mismatched += s != (*g_docs)[i];
            bytes += s.size();
        }
    }
    state.SetBytesProcessed(static_cast<int64_t>(bytes));
    state.counters["roundtrip_mismatches"] = static_cast<double>(mismatched);
}

}  // namespace

int main(int argc, char** argv) {
    std::string corpus = std::string(DSV4_SOURCE_DIR) + "/tests/tokenizer/data/corpus.jsonl";
    std::string tokenizer_path, dump;
    std::vector<char*> rest{argv[0]};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--corpus" && i + 1 < argc) corpus = argv[++i];
        else if (a == "--tokenizer" && i + 1 < argc) tokenizer_path = argv[++i];
        else if (a == "--dump-ids" && i + 1 < argc) dump = argv[++i];
        else rest.push_back(argv[i]);
    }
    try {
        if (tokenizer_path.empty()) tokenizer_path = dsv4::tok::find_tokenizer_json("").string();
        const auto tokenizer = dsv4::tok::Tokenizer::from_file(tokenizer_path);
        const auto docs = read_corpus(corpus);
        if (!dump.empty()) {
            std::ofstream out(dump);
            for (const std::string& d : docs) {
                const auto ids = tokenizer.encode(d);
                for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
                out << '\n';
            }
            return out.good() ? 0 : 1;
        }
        g_tokenizer = &tokenizer;
        g_docs = &docs;
        benchmark::RegisterBenchmark("encode_corpus_warm", BM_Encode)->Arg(0)->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark("encode_corpus_cold", BM_Encode)->Arg(1)->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark("decode_corpus", BM_Decode)->Unit(benchmark::kMillisecond);
        int n = static_cast<int>(rest.size());
        benchmark::Initialize(&n, rest.data());
        benchmark::RunSpecifiedBenchmarks();
        benchmark::Shutdown();
    } catch (const dsv4::Error& e) {
        std::fprintf(stderr, "dsv4_bench_tokenizer: %s\n", e.what());
        return 1;
    }
    return 0;
}

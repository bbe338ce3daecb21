// dsv4 chat driven through stdin on the tiny synthetic model: a scripted conversation with /reset and /quit; every
// reply equals what generate computes for the same rendered conversation (so the reused sequence state is exact
// and /reset really forgets); an error in one turn is reported and the chat goes on; end of input exits.
#include <gtest/gtest.h>

#include <regex>

#include <nlohmann/json.hpp>

#include "tool_test_util.h"

namespace dsv4 {
namespace {

using namespace dsv4::testing;

Result chat(const std::string& script, const std::string& flags = "") {
    const std::string input = write_text("chat_input.txt", script);
    return run_split("chat -q -m " + tiny_model() + " -n 6 " + flags + " < " + input);
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

// What generate prints for a conversation rendered in chat mode (one reply, -n 6).
std::string reply_to(const nlohmann::ordered_json& messages) {
    const std::string file = write_text("conversation.json", messages.dump());
    Result rendered = run_split("render --messages " + file + " --print-ids");
    EXPECT_EQ(rendered.exit_code, 0) << rendered.errors;
    const std::string ids = write_text("conversation_ids.txt", rendered.output);
    Result r = run_split("generate -q -m " + tiny_model() + " --ids-file " + ids + " -n 6");
    EXPECT_EQ(r.exit_code, 0) << r.errors;
    return r.output;
}

TEST(Chat, ScriptedConversationWithResetAndQuit) {
    DSV4_REQUIRE_TOKENIZER();
    Result r = chat("Hello there\nHow are you?\n\n/reset\nHello there\n/quit\nnever read\n", "-v");
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    // Off a terminal: no prompts or banners, only replies (one line each here) and the reset note.
    std::vector<std::string> out = lines_of(r.output);
    ASSERT_EQ(out.size(), 4u) << r.output;
    EXPECT_EQ(out[2], "(conversation cleared)");
    EXPECT_FALSE(out[0].empty());
    EXPECT_EQ(out[0], out[3]) << "after /reset the same message must get the same (greedy) reply";

    // Each reply equals a fresh generate over the conversation as rendered.
    nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hello there"}}};
    EXPECT_EQ(out[0] + "\n", reply_to(messages));
    messages.push_back({{"role", "assistant"}, {"content", out[0]}});
    messages.push_back({{"role", "user"}, {"content", "How are you?"}});
    EXPECT_EQ(out[1] + "\n", reply_to(messages));

    // -v: the second turn reused the sequence state, the turn after /reset did not; "never read" was not.
    std::vector<std::string> stats;
    for (const auto& line : lines_of(r.errors))
        if (line.rfind("(prompt ", 0) == 0) stats.push_back(line);
    ASSERT_EQ(stats.size(), 3u) << r.errors;
    EXPECT_NE(stats[0].find(", 0 reused"), std::string::npos) << stats[0];
    EXPECT_EQ(stats[1].find(", 0 reused"), std::string::npos) << stats[1];
    EXPECT_NE(stats[2].find(", 0 reused"), std::string::npos) << stats[2];
    // What was computed is the prompt less what was reused.
    const std::regex counts(R"(^\(prompt (\d+) tokens, (\d+) reused from the last turn, (\d+) computed in .*)");
    for (const std::string& line : stats) {
        std::smatch m;
        ASSERT_TRUE(std::regex_match(line, m, counts)) << line;
        EXPECT_EQ(std::stoll(m[3]), std::stoll(m[1]) - std::stoll(m[2])) << line;
    }
}

TEST(Chat, ErrorInATurnIsReportedAndTheChatGoesOn) {
    DSV4_REQUIRE_TOKENIZER();
    std::string too_long;
    for (int i = 0; i < 5000; ++i) too_long += " hello";
    Result r = chat("Hello there\n" + too_long + "\n/nonsense\nHello there\n");  // ends without /quit: EOF exits
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_NE(r.errors.find("dsv4: error: the conversation is"), std::string::npos) << r.errors;
    EXPECT_NE(r.errors.find("/reset"), std::string::npos) << r.errors;
    EXPECT_NE(r.errors.find("unknown command /nonsense"), std::string::npos) << r.errors;
    std::vector<std::string> out = lines_of(r.output);
    ASSERT_EQ(out.size(), 2u) << r.output;
    // The failed turn left the history alone: the second reply continues [Hello there, reply, Hello there].
    nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hello there"}},
                                       {{"role", "assistant"}, {"content", out[0]}},
                                       {{"role", "user"}, {"content", "Hello there"}}};
    EXPECT_EQ(out[1] + "\n", reply_to(messages));
}

TEST(Chat, ThinkingModeAndBadFlags) {
    DSV4_REQUIRE_TOKENIZER();
    Result r = chat("Hi\n", "--thinking --effort max --system " + quote("You are terse."));
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    ASSERT_FALSE(r.output.empty());
    EXPECT_EQ(r.output.rfind("> ", 0), 0u) << "reasoning is shown apart: " << r.output;

    r = chat("Hi\n", "--effort max");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.errors.find("add --thinking"), std::string::npos) << r.errors;
    r = chat("Hi\n", "--thinking --effort extreme");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.errors.find("extreme"), std::string::npos) << r.errors;
    r = run_split("chat -q -m " + tiny_model() + " < /dev/null", "DSV4_TOKENIZER_JSON=/nonexistent");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.errors.find("no tokenizer.json"), std::string::npos) << r.errors;
}

}  // namespace
}  // namespace dsv4

// A byte-at-a-time recognizer of a DeepSeek-V4 reply's tool-call block (DSML, spec/dsv4-encoding.md §2.5), written
// so that the completion parser (§4, tokenizer/completion.h) reads it without error and each call's arguments satisfy
// its tool's parameter schema:
//
//   \n\n<｜DSML｜tool_calls>\n
//   <｜DSML｜invoke name="TOOL">\n
//   <｜DSML｜parameter name="P" string="true">raw text</｜DSML｜parameter>\n
//   <｜DSML｜parameter name="Q" string="false">JSON</｜DSML｜parameter>\n
//   </｜DSML｜invoke>\n
//   <｜DSML｜invoke name="TOOL2">\n\n</｜DSML｜invoke>        (a call without parameters)
//   \n</｜DSML｜tool_calls>
//
// A parameter is a property of the tool's schema (each at most once, the required ones before the invoke closes) or,
// where the schema allows other properties, another name (each at most once). Its value is raw text
// (string="true", which the parser turns into a JSON string: the property must allow a string, and the string must
// satisfy it) or a JSON text (string="false") that satisfies the property. Neither a name nor a value may hold
// "｜DSML｜" (the parser ends a value at the first "/｜DSML｜parameter"). As SchemaCursor: every accepted prefix can be
// completed, so a generator that emits only accepted bytes and ends where complete() holds has written calls the
// parser reads. Tested in tests/structured/tool_call_cursor_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "structured/json_schema.h"
#include "structured/schema_cursor.h"
#include "structured/sorted_names.h"
#include "structured/whole_feeds.h"

namespace dsv4 {

struct ToolSpec {
    std::string name;
    // The arguments: an object schema whose properties are the call's parameters (CompiledSchema::any_object(): any
    // names, any values).
    std::shared_ptr<const CompiledSchema> parameters;
};

// The tools a reply may call, and where the block may begin.
class ToolCallGrammar {
  public:
    enum class Start {
        kAtOnce,        // the reply is the block (tool_choice "required" or a named function)
        kAfterContent,  // free content, then perhaps the block, found as the completion parser finds it
    };

    // Throws dsv4::Error naming the tool for what DSML cannot write: a tool named twice, a name (of a tool or a
    // parameter) that is empty (tools) or holds '"', a control character or "｜DSML｜", a parameter name that JSON
    // would escape, parameters whose schema cannot be an object.
    ToolCallGrammar(std::vector<ToolSpec> tools, Start start, bool one_call);

    const std::vector<ToolSpec>& tools() const { return tools_; }  // sorted by name
    Start start() const { return start_; }
    bool one_call() const { return one_call_; }
    // The object node of tool i's parameters.
    const SchemaNode& parameters(int i) const;

  private:
    std::vector<ToolSpec> tools_;
    Start start_;
    bool one_call_;
};

// Whole UTF-8 characters (RFC 3629: no overlong forms, surrogates or code points past U+10FFFF), byte by byte.
struct Utf8Check {
    uint8_t left = 0, lo = 0x80, hi = 0xBF;  // continuation bytes to come; the next one's range
    bool feed(uint8_t b);                    // false (nothing changed) for a byte that cannot come
    bool whole() const { return left == 0; }
};

class ToolCallCursor : public WholeFeeds<ToolCallCursor> {
  public:
    // `grammar` must outlive the cursor.
    explicit ToolCallCursor(const ToolCallGrammar* grammar);

    // Appends `byte` if the text stays a prefix of a valid reply; otherwise returns false and changes nothing.
    bool feed(uint8_t byte);
    // All of `bytes` or none; accepts(bytes): whether they can follow (WholeFeeds).
    using WholeFeeds::feed;
    // The reply may end here: content with no block begun (Start::kAfterContent), or after the block's close.
    bool complete() const {
        return (phase_ == Phase::kContent && watch_ < kMarkerInBlockStart) || phase_ == Phase::kDone;
    }

    // Content before a block (Start::kAfterContent): free text but for what the completion parser refuses in content
    // ("｜DSML｜" but in a block's opening, "<think>", "</think>", the BOS and EOS texts).
    bool in_content() const { return phase_ == Phase::kContent; }
    // In content: whether the text ends with part of a block's opening from its "｜DSML｜" on (only the opening's rest
    // may follow), and the bytes that may continue any such text it ends with part of (a byte that begins none and is
    // in none of these cannot complete one).
    bool content_in_block_start() const { return phase_ == Phase::kContent && watch_ >= kMarkerInBlockStart; }
    std::array<bool, 256> content_markup_next() const;
    // Between names and values, where only markup may come (a markup token such as "｜DSML｜" may spell it).
    bool in_markup() const { return phase_ == Phase::kMarkup; }
    // Where any whole characters of ordinary text without '"', '\', '<' or the byte 0xEF (TokenTable::plain_texts)
    // may follow: a raw or JSON string value nothing constrains, an other parameter name.
    bool in_free_text() const;
    // In free text, a raw value's: any whole characters without '<' or 0xEF (TokenTable::raw_texts) may follow.
    bool in_raw_value() const { return phase_ == Phase::kRawValue; }

    // The block's opening up to the first tool's name (Start::kAtOnce), and what follows the content's
    // "\n\n<｜DSML｜tool_calls" (Start::kAfterContent).
    static constexpr std::string_view kOpening = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"";
    static constexpr std::string_view kBlockStart = "\n\n<｜DSML｜tool_calls";
    // The bytes with which a text the content may not hold, or a block's opening, begins: '\n', '<', and 0xEF ('｜').
    static bool markup_start(uint8_t b) { return b == '\n' || b == '<' || b == 0xEF; }

  private:
    friend class WholeFeeds;
    enum class Phase : uint8_t {
        kContent,    // free text, watching for kBlockStart
        kMarkup,     // one of the literals in `literals_`, `offset_` bytes in
        kToolName,   // a tool's name (tool_name_)
        kParamName,  // a parameter's name
        kRawValue,   // string="true": the text, JSON-escaped, into value_ (after its opening '"')
        kJsonValue,  // string="false": the JSON text into value_
        kDone,       // after the block's close
    };

    bool step(uint8_t b);
    bool markup_byte(uint8_t b);
    void markup_done(int literal);
    void expect(uint32_t literals);
    void after_parameter();
    bool tool_name_byte(uint8_t b);
    bool param_name_byte(uint8_t b);
    bool close_param_name();
    bool raw_value_byte(uint8_t b);
    bool json_value_byte(uint8_t b);
    bool string_allowed(int node) const;
    const ToolSpec& tool() const { return grammar_->tools()[size_t(tool_)]; }
    const SchemaNode& params() const { return grammar_->parameters(tool_); }

    const ToolCallGrammar* grammar_;
    Phase phase_;
    uint32_t literals_ = 0;                         // kMarkup: the literals still matching (bit i: literal i)
    int offset_ = 0;                                // bytes read of the literal or the name
    static constexpr int kMarkerInBlockStart = 13;  // the bytes of "\n\n<｜DSML｜"
    static constexpr size_t kTail = 32;             // more than the longest text content may not hold

    bool content_byte(uint8_t b);

    int watch_ = 0;    // kContent: bytes of kBlockStart matched; names and values: bytes of "｜DSML｜" matched
    int pending_ = 0;  // kRawValue: bytes of "</｜DSML｜" held back (they may be the value's close)
    SortedNameRange tool_name_;  // kToolName: the tools whose names begin with the bytes read
    int tool_ = 0;
    uint64_t keys_ = 0;  // kParamName: the properties whose names begin with the bytes read
    uint64_t used_ = 0;  // the call's properties written
    int value_node_ = 0;
    std::string name_;                // kParamName: the bytes read, where other names are allowed
    Utf8Check name_utf8_;             // kParamName: whether those are whole characters
    std::string other_names_;         // the call's other names written, each followed by '\0'
    SchemaCursor value_;              // the value being read
    std::array<char, kTail> tail_{};  // kContent: its last bytes
    uint8_t tail_size_ = 0;
};

}  // namespace dsv4

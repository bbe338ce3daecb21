// A byte-at-a-time recognizer of one JSON text that satisfies a compiled schema (json_schema.h): JsonCursor reads the
// syntax, and each byte it takes is checked against the node of the value it belongs to (types, enum values, property
// names, required properties, item counts, string lengths). As JsonCursor: every accepted prefix can still be
// completed (up to the depth limit), so a generator that only emits accepted bytes and stops where complete() holds
// has written a valid document. Tested in tests/runtime/json_schema_test.cpp.
#pragma once

#include <cstdint>
#include <string_view>

#include "structured/json_cursor.h"
#include "structured/json_schema.h"
#include "structured/whole_feeds.h"

namespace dsv4 {

class SchemaCursor : public WholeFeeds<SchemaCursor> {
  public:
    // `schema` must outlive the cursor. limits.max_depth is capped at kMaxDepth. The document is one value of node
    // `root` (SchemaNode::kNone: the schema's root; a tool call's parameter is one of its property's node).
    SchemaCursor(const CompiledSchema* schema, JsonLimits limits = {}, int root = SchemaNode::kNone);
    // Copies only the open frames (a token mask copies the cursor for every id it tries).
    SchemaCursor(const SchemaCursor& other) { *this = other; }
    SchemaCursor& operator=(const SchemaCursor& other);

    // Appends `byte` if the text stays a prefix of a valid document; otherwise returns false and changes nothing.
    bool feed(uint8_t byte);
    // Whether all of `bytes` can follow (nothing is changed); appends them all or none (WholeFeeds).
    using WholeFeeds::feed;
    // A whole valid document.
    bool complete() const;
    // In a string whose content nothing constrains (a value without enum or maxLength; a key that can be no property
    // name, where other names are allowed): any whole characters of ordinary string content may follow (a token
    // mask's fast path).
    bool in_free_string() const;

    const JsonLex& lex() const { return syntax_.lex(); }

    static constexpr int kMaxDepth = 64;

  private:
    friend class WholeFeeds;
    // An open container: its node, and for objects the properties seen and the node of the value being read; for
    // arrays the items completed.
    // No member initializers: a cursor's copy leaves the frames past depth_ as they are (never read), and a new
    // frame is made whole (Frame{...} zeroes what it does not name).
    struct Frame {
        int node;
        int value_node;
        uint64_t used;
        int count;
        bool object;
    };
    // The scalar (string, number, literal) or key being read: the enum values or property names it may still become
    // (bit masks) and the bytes matched so far; a string's code points.
    struct Scalar {
        int node = -1;
        bool string = false;    // a string value (its length is counted)
        bool matching = false;  // enum values constrain it
        bool integer = false;   // a number without fraction or exponent
        uint64_t candidates = 0;
        uint64_t any_key = 0;  // keys: every property the name may still be, used or not
        int offset = 0;
        int chars = 0;
    };

    bool step(uint8_t b);
    bool between_tokens(uint8_t b, const JsonLex& before, const JsonLex& after);
    bool start_value(uint8_t b, const JsonLex& after);
    bool start_key();
    bool key_byte(uint8_t b);
    bool close_key();
    bool scalar_byte(uint8_t b);
    bool end_scalar();
    void value_done();
    bool close_container();
    bool comma() const;
    int expected_node() const;
    bool allows(int i, uint8_t family) const;
    const SchemaNode& node(int i) const { return schema_->nodes[size_t(i)]; }

    const CompiledSchema* schema_;
    int root_;
    JsonCursor syntax_;
    int depth_ = 0;
    Frame frames_[kMaxDepth];  // [0, depth_) are the open containers, outermost first
    Scalar scalar_;
};

}  // namespace dsv4

// SchemaCursor: see schema_cursor.h. Each byte goes through the syntax (JsonCursor) first; what it means for the
// schema (a value's start, a key's byte, a container's close) is read from the syntax's mode before and after it.
#include "structured/schema_cursor.h"

#include <algorithm>

namespace dsv4 {
namespace {

bool is_whitespace(uint8_t b) {
    return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}

bool in_string(JsonLex::Mode m) {
    return m == JsonLex::kString || m == JsonLex::kEscape || m == JsonLex::kHex || m == JsonLex::kUtf8 ||
           m == JsonLex::kLowSlash || m == JsonLex::kLowU;
}
bool in_number(JsonLex::Mode m) {
    return m >= JsonLex::kMinus && m <= JsonLex::kExpInt;
}

uint64_t first_bits(size_t n) {
    return n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
}

JsonLimits capped(JsonLimits limits) {
    limits.max_depth = std::min(limits.max_depth, SchemaCursor::kMaxDepth);
    limits.object_only = false;  // the root node decides
    return limits;
}

}  // namespace

SchemaCursor::SchemaCursor(const CompiledSchema* schema, JsonLimits limits, int root)
    : schema_(schema), root_(root == SchemaNode::kNone ? schema->root : root), syntax_(capped(limits)) {}

SchemaCursor& SchemaCursor::operator=(const SchemaCursor& other) {
    if (this == &other) return *this;
    schema_ = other.schema_;
    root_ = other.root_;
    syntax_ = other.syntax_;
    scalar_ = other.scalar_;
    depth_ = other.depth_;
    std::copy(other.frames_, other.frames_ + other.depth_, frames_);
    return *this;
}

bool SchemaCursor::feed(uint8_t byte) {
    SchemaCursor next = *this;
    if (!next.step(byte)) return false;
    *this = next;
    return true;
}

bool SchemaCursor::complete() const {
    if (!syntax_.complete()) return false;
    if (!in_number(syntax_.lex().mode)) return true;
    SchemaCursor end = *this;  // a top-level number ends here: its enum values must allow it
    return end.end_scalar();
}

bool SchemaCursor::in_free_string() const {
    const JsonLex& lex = syntax_.lex();
    if (lex.mode != JsonLex::kString) return false;
    // A key no property name can become any more, where other names are allowed; a value without enum or maxLength.
    if (lex.key) return scalar_.any_key == 0 && node(scalar_.node).additional != SchemaNode::kNone;
    return !scalar_.matching && node(scalar_.node).max_length == SchemaNode::kUnbounded;
}

// Whether node i's values may be of a type in `family` (its enum values' types, where it has them).
bool SchemaCursor::allows(int i, uint8_t family) const {
    const SchemaNode& n = node(i);
    if (!n.branches.empty())
        return std::any_of(n.branches.begin(), n.branches.end(), [&](int b) { return allows(b, family); });
    if (n.literals.empty()) return (n.types & family) != 0;
    return std::any_of(n.literals.begin(), n.literals.end(), [&](const std::string& lit) {
        const uint8_t f = lit[0] == '"'                      ? kSchemaString
                          : lit[0] == '{'                    ? kSchemaObject
                          : lit[0] == '['                    ? kSchemaArray
                          : lit[0] == 'n'                    ? kSchemaNull
                          : (lit[0] == 't' || lit[0] == 'f') ? kSchemaBoolean
                                                             : (kSchemaNumber | kSchemaInteger);
        return (f & family) != 0;
    });
}

int SchemaCursor::expected_node() const {
    if (depth_ == 0) return root_;
    const Frame& f = frames_[depth_ - 1];
    return f.object ? f.value_node : node(f.node).items;
}

// The byte through the syntax first; then what it means for the schema.
bool SchemaCursor::step(uint8_t b) {
    const JsonLex before = syntax_.lex();
    if (!syntax_.feed(b)) return false;
    const JsonLex& after = syntax_.lex();
    if (in_string(before.mode)) {
        const bool closes = before.mode == JsonLex::kString && b == '"';
        if (before.key) return closes ? close_key() : key_byte(b);
        if (!scalar_byte(b)) return false;
        if (before.mode == JsonLex::kString && !closes) {  // a character starts (an escape or a UTF-8 lead counts once)
            if (++scalar_.chars > node(scalar_.node).max_length) return false;
        }
        if (!closes) return true;
        if (!end_scalar()) return false;
        value_done();
        return true;
    }
    if (in_number(before.mode)) {
        if (in_number(after.mode)) {
            if (scalar_.integer && (b == '.' || b == 'e' || b == 'E')) return false;
            return scalar_byte(b);
        }
        if (!end_scalar())
            return false;  // the number ended before this byte, which the syntax took as the next token's
        value_done();
        return between_tokens(b, JsonLex{.mode = JsonLex::kAfterValue}, after);
    }
    if (before.mode == JsonLex::kLiteral) {
        if (!scalar_byte(b)) return false;
        if (after.mode == JsonLex::kLiteral) return true;
        if (!end_scalar()) return false;
        value_done();
        return true;
    }
    return between_tokens(b, before, after);
}

bool SchemaCursor::between_tokens(uint8_t b, const JsonLex& before, const JsonLex& after) {
    if (is_whitespace(b) || b == ':') return true;  // a key's node was chosen when it closed
    if (b == ',') return comma();
    if ((b == '}' || b == ']') && (before.mode == JsonLex::kObjectFirst || before.mode == JsonLex::kArrayFirst ||
                                   before.mode == JsonLex::kAfterValue))
        return close_container();
    if (b == '"' && (before.mode == JsonLex::kObjectFirst || before.mode == JsonLex::kKey)) return start_key();
    return start_value(b, after);
}

bool SchemaCursor::start_value(uint8_t b, const JsonLex& after) {
    // The value's type family, from its first byte; an anyOf takes the branch that allows it.
    const uint8_t family = after.mode == JsonLex::kObjectFirst  ? kSchemaObject
                           : after.mode == JsonLex::kArrayFirst ? kSchemaArray
                           : after.mode == JsonLex::kString     ? kSchemaString
                           : after.mode == JsonLex::kLiteral    ? (b == 'n' ? kSchemaNull : kSchemaBoolean)
                                                                : (kSchemaNumber | kSchemaInteger);
    int at = expected_node();
    while (!node(at).branches.empty()) {
        const std::vector<int>& branches = node(at).branches;
        const auto it = std::find_if(branches.begin(), branches.end(), [&](int i) { return allows(i, family); });
        if (it == branches.end()) return false;
        at = *it;
    }
    const SchemaNode& n = node(at);
    if (depth_ > 0 && !frames_[depth_ - 1].object &&
        frames_[depth_ - 1].count >= node(frames_[depth_ - 1].node).max_items)
        return false;  // an array's first item past maxItems 0 (later ones are refused at their comma)
    if (after.mode == JsonLex::kObjectFirst || after.mode == JsonLex::kArrayFirst) {
        const bool object = after.mode == JsonLex::kObjectFirst;
        if (!n.literals.empty() || !(n.types & (object ? kSchemaObject : kSchemaArray))) return false;
        if (depth_ >= kMaxDepth) return false;
        frames_[depth_++] = Frame{.node = at, .value_node = 0, .used = 0, .count = 0, .object = object};
        return true;
    }
    scalar_ = Scalar{.node = at, .string = after.mode == JsonLex::kString};
    if (!n.literals.empty()) {
        scalar_.matching = true;
        scalar_.candidates = first_bits(n.literals.size());
        return scalar_byte(b);
    }
    switch (after.mode) {
        case JsonLex::kString:
            return n.types & kSchemaString;
        case JsonLex::kLiteral:
            return (n.types & (b == 'n' ? kSchemaNull : kSchemaBoolean)) != 0;
        default:  // a number
            scalar_.integer = !(n.types & kSchemaNumber);
            return (n.types & (kSchemaNumber | kSchemaInteger)) != 0;
    }
}

// A value's byte against the enum values it may still be (nothing to check without them).
bool SchemaCursor::scalar_byte(uint8_t b) {
    if (!scalar_.matching) return true;
    const std::vector<std::string>& lits = node(scalar_.node).literals;
    uint64_t left = 0;
    for (uint64_t c = scalar_.candidates; c; c &= c - 1) {
        const int i = __builtin_ctzll(c);
        const std::string& lit = lits[size_t(i)];
        if (size_t(scalar_.offset) < lit.size() && uint8_t(lit[size_t(scalar_.offset)]) == b) left |= uint64_t(1) << i;
    }
    scalar_.candidates = left;
    ++scalar_.offset;
    return left != 0;
}

// The value read whole: one of its enum values exactly; a string's minLength.
bool SchemaCursor::end_scalar() {
    const SchemaNode& n = node(scalar_.node);
    if (scalar_.string && scalar_.chars < n.min_length) return false;
    if (scalar_.matching) {
        bool exact = false;
        for (uint64_t c = scalar_.candidates; c; c &= c - 1)
            exact = exact || n.literals[size_t(__builtin_ctzll(c))].size() == size_t(scalar_.offset);
        if (!exact) return false;
    }
    scalar_ = Scalar{};
    return true;
}

void SchemaCursor::value_done() {
    if (depth_ > 0 && !frames_[depth_ - 1].object) ++frames_[depth_ - 1].count;
}

bool SchemaCursor::start_key() {
    const Frame& f = frames_[depth_ - 1];
    const SchemaNode& n = node(f.node);
    scalar_ = Scalar{.node = f.node};
    scalar_.any_key = first_bits(n.keys.size());
    scalar_.candidates = scalar_.any_key & ~f.used;
    return scalar_.candidates != 0 || n.additional != SchemaNode::kNone;
}

bool SchemaCursor::key_byte(uint8_t b) {
    const SchemaNode& n = node(scalar_.node);
    uint64_t left = 0;
    for (uint64_t c = scalar_.any_key; c; c &= c - 1) {
        const int i = __builtin_ctzll(c);
        const std::string& key = n.keys[size_t(i)];
        if (size_t(scalar_.offset) < key.size() && uint8_t(key[size_t(scalar_.offset)]) == b) left |= uint64_t(1) << i;
    }
    scalar_.any_key = left;
    scalar_.candidates &= left;
    ++scalar_.offset;
    return scalar_.candidates != 0 || n.additional != SchemaNode::kNone;
}

// The key read whole: a property not seen yet (its node is the value's), or another name where additional
// properties are allowed; never a property a second time.
bool SchemaCursor::close_key() {
    Frame& f = frames_[depth_ - 1];
    const SchemaNode& n = node(f.node);
    int exact = -1;
    for (uint64_t c = scalar_.any_key; c; c &= c - 1) {
        const int i = __builtin_ctzll(c);
        if (n.keys[size_t(i)].size() == size_t(scalar_.offset)) exact = i;
    }
    scalar_ = Scalar{};
    if (exact >= 0) {
        if (f.used & (uint64_t(1) << exact)) return false;
        f.used |= uint64_t(1) << exact;
        f.value_node = n.key_nodes[size_t(exact)];
        return true;
    }
    if (n.additional == SchemaNode::kNone) return false;
    f.value_node = n.additional;
    return true;
}

bool SchemaCursor::comma() const {
    const Frame& f = frames_[depth_ - 1];
    const SchemaNode& n = node(f.node);
    if (!f.object) return f.count < n.max_items;
    return (first_bits(n.keys.size()) & ~f.used) != 0 || n.additional != SchemaNode::kNone;
}

bool SchemaCursor::close_container() {
    const Frame& f = frames_[depth_ - 1];
    const SchemaNode& n = node(f.node);
    if (f.object ? (n.required & ~f.used) != 0 : f.count < n.min_items) return false;
    --depth_;
    value_done();
    return true;
}

}  // namespace dsv4

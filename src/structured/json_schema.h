// A JSON Schema (response_format "json_schema") compiled into the nodes a SchemaCursor checks byte by byte. The
// subset: type (one or a list; "integer" is a number without fraction or exponent), properties, required,
// additionalProperties (a boolean or a schema; absent: any), items, minItems, maxItems, minLength, maxLength (in
// code points), enum and const (strings, numbers, booleans, null: the value spelled as a compact JSON writer spells
// it), anyOf / oneOf whose branches are of different types (Optional[X] is X or null), $ref to "#", "#/$defs/..." or
// "#/definitions/...", nullable, allOf of one schema; annotations (title, description, default, examples, format,
// $schema, $id, $comment, ...) are accepted and not enforced, as JSON Schema defines them. Every other keyword is
// refused with its path, never ignored. Tested in tests/runtime/json_schema_test.cpp.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsv4 {

enum SchemaType : uint8_t {
    kSchemaObject = 1,
    kSchemaArray = 2,
    kSchemaString = 4,
    kSchemaNumber = 8,
    kSchemaInteger = 16,  // a number without fraction or exponent
    kSchemaBoolean = 32,
    kSchemaNull = 64,
    kSchemaAnyType = 127,
};

struct SchemaNode {
    static constexpr int kNone = -1;
    static constexpr int kUnbounded = std::numeric_limits<int>::max();
    uint8_t types = kSchemaAnyType;
    // anyOf / oneOf: the branches, of different type families; a value is read by the one its type picks.
    std::vector<int> branches;
    std::vector<std::string> literals;  // enum / const, each as a compact JSON text; when not empty, only these
    // Objects: the property names as the bodies of JSON strings (the text between the quotes), their nodes, which
    // are required (bit i: property i), and the node of any other property (kNone: none allowed).
    std::vector<std::string> keys;
    std::vector<int> key_nodes;
    uint64_t required = 0;
    int additional = 0;
    // Arrays: the node of every item, the bounds of their count.
    int items = 0;
    int min_items = 0, max_items = kUnbounded;
    // Strings: the bounds of their length in code points.
    int min_length = 0, max_length = kUnbounded;
};

struct CompiledSchema {
    std::vector<SchemaNode> nodes;  // nodes[0]: any value
    int root = 0;

    // Any JSON object (response_format "json_object").
    static std::shared_ptr<const CompiledSchema> any_object();
};

// Throws dsv4::Error with a sentence naming the keyword and where it is ("#/properties/a/pattern: ...", for the caller
// to say which schema) for what the subset
// above does not hold, an unresolvable $ref, or a schema no value satisfies that is found without solving it (an empty
// enum, minimum above maximum).
std::shared_ptr<const CompiledSchema> compile_schema(const nlohmann::json& schema);

}  // namespace dsv4

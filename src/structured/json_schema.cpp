// compile_schema: see json_schema.h. Nodes are compiled children first; a $ref reserves its node before its target
// is compiled, so recursion finds it; an anyOf keeps its branches, told apart by the type of a value's first byte.
#include "structured/json_schema.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"

namespace dsv4 {
namespace {

using nlohmann::json;

constexpr size_t kMaxProperties = 64, kMaxLiterals = 64;  // bit masks of 64

// Keywords JSON Schema defines as annotations: accepted, never enforced.
const std::set<std::string, std::less<>> kAnnotations = {
    "title",    "description", "default",  "examples",  "format",  "$schema",         "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly", "$anchor", "contentEncoding", "contentMediaType",
    "$defs",    "definitions"};

const std::set<std::string, std::less<>> kEnforced = {"type",      "properties", "required", "additionalProperties",
                                                      "items",     "minItems",   "maxItems", "minLength",
                                                      "maxLength", "enum",       "const",    "anyOf",
                                                      "oneOf",     "$ref",       "nullable", "allOf"};

// The type families an anyOf may hold one branch of each.
struct Family {
    uint8_t bits;
    const char* name;
};
constexpr Family kFamilies[] = {{kSchemaObject, "object"},   {kSchemaArray, "array"},
                                {kSchemaString, "string"},   {kSchemaNumber | kSchemaInteger, "number"},
                                {kSchemaBoolean, "boolean"}, {kSchemaNull, "null"}};

uint8_t type_bit(const json& name, const std::string& path) {
    static const std::map<std::string, uint8_t, std::less<>> kTypes = {
        {"object", kSchemaObject},   {"array", kSchemaArray},     {"string", kSchemaString}, {"number", kSchemaNumber},
        {"integer", kSchemaInteger}, {"boolean", kSchemaBoolean}, {"null", kSchemaNull}};
    if (name.is_string())
        if (const auto it = kTypes.find(name.get<std::string>()); it != kTypes.end()) return it->second;
    fail("{}/type: {} is not a JSON Schema type", path, name.dump());
}

// The JSON text of a literal, as a compact writer spells it; the type bit it has.
std::string literal_text(const json& v, const std::string& path) {
    if (v.is_object() || v.is_array())
        fail("{}: enum and const values must be strings, numbers, booleans or null", path);
    return v.dump(-1, ' ', /*ensure_ascii=*/false);
}

int non_negative(const json& v, const std::string& path) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > SchemaNode::kUnbounded)
        fail("{} must be a non-negative integer, got {}", path, v.dump());
    return int(v.get<int64_t>());
}

class Compiler {
  public:
    explicit Compiler(const json& root) : root_(root) { out_.nodes.emplace_back(); }

    int compile(const json& s, const std::string& path) {
        struct Nesting {  // the recursion's depth, bounded: a schema nested without end must not exhaust the stack
            int& depth;
            explicit Nesting(int& d, const std::string& path) : depth(d) {
                if (++depth > kMaxNesting) fail("{}: nested deeper than {} schemas", path, kMaxNesting);
            }
            ~Nesting() { --depth; }
        } nesting(depth_, path);
        if (s.is_boolean()) {
            if (s.get<bool>()) return 0;
            fail("{} is false: no value satisfies it", path);
        }
        if (!s.is_object()) fail("{} must be a schema (an object), got {}", path, s.dump());
        for (const auto& [key, value] : s.items())
            if (!kAnnotations.contains(key) && !kEnforced.contains(key))
                fail("{}/{}: the keyword \"{}\" is not supported by dsv4 (it would not be enforced)", path, key, key);
        const auto enforced_besides = [&](std::string_view keyword) {
            return std::any_of(s.items().begin(), s.items().end(),
                               [&](const auto& kv) { return kEnforced.contains(kv.key()) && kv.key() != keyword; });
        };
        if (s.contains("$ref")) {
            if (enforced_besides("$ref")) fail("{}: keywords beside $ref are not supported", path);
            return reference(s.at("$ref"), path);
        }
        if (s.contains("allOf")) {  // one schema only: how some writers attach a description to a $ref
            const json& all = s.at("allOf");
            if (!all.is_array() || all.size() != 1 || enforced_besides("allOf"))
                fail(
                    "{}/allOf: only a single schema with nothing enforced beside "
                    "it is supported",
                    path);
            return compile(all[0], path + "/allOf/0");
        }
        for (const char* any_of : {"anyOf", "oneOf"})
            if (s.contains(any_of)) {
                if (enforced_besides(any_of)) fail("{}: keywords beside {} are not supported", path, any_of);
                return branches(s.at(any_of), path + "/" + any_of);
            }
        SchemaNode node = plain(s, path);
        out_.nodes.push_back(std::move(node));
        return int(out_.nodes.size() - 1);
    }

    CompiledSchema take(int root) {
        out_.root = root;
        return std::move(out_);
    }

  private:
    SchemaNode plain(const json& s, const std::string& path) {
        SchemaNode node;
        if (const auto it = s.find("type"); it != s.end()) {
            node.types = 0;
            if (it->is_array()) {
                for (const json& t : *it) node.types |= type_bit(t, path);
                if (node.types == 0) fail("{}/type is an empty list", path);
            } else {
                node.types = type_bit(*it, path);
            }
        }
        if (s.contains("nullable") && !s.at("nullable").is_boolean()) fail("{}/nullable must be a boolean", path);
        if (s.value("nullable", false)) node.types |= kSchemaNull;
        if (s.contains("enum") || s.contains("const")) {
            const json values = s.contains("const") ? json::array({s.at("const")}) : s.at("enum");
            if (!values.is_array() || values.empty() || values.size() > kMaxLiterals)
                fail("{}/enum must be a list of 1 to {} values", path, kMaxLiterals);
            for (const json& v : values) node.literals.push_back(literal_text(v, path + "/enum"));
            std::sort(node.literals.begin(), node.literals.end());
            node.literals.erase(std::unique(node.literals.begin(), node.literals.end()), node.literals.end());
        }
        if (const auto it = s.find("properties"); it != s.end()) {
            if (!it->is_object() || it->size() > kMaxProperties)
                fail("{}/properties must be an object of at most {} properties", path, kMaxProperties);
            for (const auto& [name, sub] : it->items()) {
                const std::string text = json(name).dump(-1, ' ', false);
                node.keys.push_back(text.substr(1, text.size() - 2));
                node.key_nodes.push_back(-1);  // compiled below: compiling may add nodes
            }
            size_t i = 0;
            for (const auto& [name, sub] : it->items())
                node.key_nodes[i++] = compile(sub, path + "/properties/" + name);
        }
        if (const auto it = s.find("required"); it != s.end()) {
            if (!it->is_array()) fail("{}/required must be a list of names", path);
            for (const json& name : *it) {
                const std::string text = name.is_string() ? json(name).dump(-1, ' ', false) : std::string();
                const auto at = text.empty()
                                    ? node.keys.end()
                                    : std::find(node.keys.begin(), node.keys.end(), text.substr(1, text.size() - 2));
                if (at == node.keys.end()) fail("{}/required names {}, which is not in properties", path, name.dump());
                node.required |= uint64_t(1) << (at - node.keys.begin());
            }
        }
        if (const auto it = s.find("additionalProperties"); it != s.end())
            node.additional =
                it->is_boolean() && !it->get<bool>() ? SchemaNode::kNone : compile(*it, path + "/additionalProperties");
        if (const auto it = s.find("items"); it != s.end()) {
            if (it->is_array()) fail("{}/items as a list is not supported", path);
            node.items = compile(*it, path + "/items");
        }
        if (s.contains("minItems")) node.min_items = non_negative(s.at("minItems"), path + "/minItems");
        if (s.contains("maxItems")) node.max_items = non_negative(s.at("maxItems"), path + "/maxItems");
        if (s.contains("minLength")) node.min_length = non_negative(s.at("minLength"), path + "/minLength");
        if (s.contains("maxLength")) node.max_length = non_negative(s.at("maxLength"), path + "/maxLength");
        if (node.min_items > node.max_items || node.min_length > node.max_length)
            fail("{}: a minimum above its maximum: no value satisfies it", path);
        return node;
    }

    int reference(const json& ref, const std::string& path) {
        if (!ref.is_string()) fail("{}/$ref must be a string", path);
        const std::string target = ref.get<std::string>();
        if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
        const json* schema = resolve(ref);
        if (!schema)
            fail(
                "{}/$ref: \"{}\" is not \"#\" or a name in the root's $defs or "
                "definitions",
                path, target);
        // Reserved first, so that a reference inside the target (recursion) finds it.
        const int at = int(out_.nodes.size());
        out_.nodes.emplace_back();
        refs_[target] = at;
        const int compiled = compile(*schema, target);
        out_.nodes[size_t(at)] = out_.nodes[size_t(compiled)];
        return at;
    }

    // anyOf / oneOf: a node of branches, each of its own type families (an object, a string, null: the first byte of
    // a value picks one).
    int branches(const json& list, const std::string& path) {
        if (!list.is_array() || list.empty()) fail("{} must be a non-empty list", path);
        SchemaNode node;
        node.types = 0;
        for (size_t i = 0; i < list.size(); ++i) {
            const int b = compile(list[i], path + "/" + std::to_string(i));
            const uint8_t types = declared_types(list[i], 0);
            for (const Family& f : kFamilies)
                if ((types & f.bits) && (node.types & f.bits))
                    fail(
                        "{}: two branches allow a {}; dsv4 takes branches "
                        "of different types only",
                        path, f.name);
            node.types |= types;
            node.branches.push_back(b);
        }
        out_.nodes.push_back(std::move(node));
        return int(out_.nodes.size() - 1);
    }

    // The types a schema's values may have, from its keywords alone (a $ref being compiled has no node yet).
    uint8_t declared_types(const json& s, int depth) const {
        if (!s.is_object() || depth > 16) return kSchemaAnyType;
        if (s.contains("$ref")) {
            const json* target = resolve(s.at("$ref"));
            return target ? declared_types(*target, depth + 1) : kSchemaAnyType;
        }
        for (const char* any_of : {"anyOf", "oneOf"})
            if (s.contains(any_of) && s.at(any_of).is_array()) {
                uint8_t types = 0;
                for (const json& b : s.at(any_of)) types |= declared_types(b, depth + 1);
                return types;
            }
        if (s.contains("enum") || s.contains("const")) {
            const json values = s.contains("const") ? json::array({s.at("const")}) : s.at("enum");
            uint8_t types = 0;
            if (values.is_array())
                for (const json& v : values)
                    types |= v.is_string()    ? kSchemaString
                             : v.is_number()  ? (kSchemaNumber | kSchemaInteger)
                             : v.is_boolean() ? kSchemaBoolean
                             : v.is_null()    ? kSchemaNull
                                              : kSchemaAnyType;
            return types;
        }
        uint8_t types = kSchemaAnyType;
        if (s.contains("type")) {
            types = 0;
            const json list = s.at("type").is_array() ? s.at("type") : json::array({s.at("type")});
            for (const json& t : list) types |= type_bit(t, "#");
            if (types & kSchemaNumber) types |= kSchemaInteger;
        }
        if (s.value("nullable", false)) types |= kSchemaNull;
        return types;
    }

    const json* resolve(const json& ref) const {
        if (!ref.is_string()) return nullptr;
        const std::string target = ref.get<std::string>();
        if (target == "#") return &root_;
        for (const std::string prefix : {"#/$defs/", "#/definitions/"})
            if (target.rfind(prefix, 0) == 0) {
                const std::string container = prefix.substr(2, prefix.size() - 3);
                const std::string name = target.substr(prefix.size());
                if (root_.contains(container) && root_.at(container).contains(name))
                    return &root_.at(container).at(name);
            }
        return nullptr;
    }

    static constexpr int kMaxNesting = 64;
    const json& root_;
    CompiledSchema out_;
    std::map<std::string, int> refs_;
    int depth_ = 0;
};

}  // namespace

std::shared_ptr<const CompiledSchema> CompiledSchema::any_object() {
    auto s = std::make_shared<CompiledSchema>();
    s->nodes.resize(2);
    s->nodes[1].types = kSchemaObject;
    s->root = 1;
    return s;
}

std::shared_ptr<const CompiledSchema> compile_schema(const json& schema) {
    try {
        Compiler c(schema);
        const int root = c.compile(schema, "#");
        return std::make_shared<const CompiledSchema>(c.take(root));
    } catch (const json::exception& e) {  // a keyword's value of the wrong JSON type (e.g. "nullable": 1)
        fail("the schema: {}", e.what());
    }
}

}  // namespace dsv4

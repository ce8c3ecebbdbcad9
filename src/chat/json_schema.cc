// The JSON Schema compiler and the byte-level matcher (json_schema.h). A schema becomes a graph
// of six node kinds (object, array, string, number, literal, anyOf); the matcher keeps one stack
// of frames per open reading and advances every reading by each byte, exactly like a pushdown
// automaton read nondeterministically (the stacks of llama.cpp's grammar sampler, by the same
// idea). A literal is a value or key spelled out as compact JSON (enum, const, true, false,
// null, declared property names).
#include "chat/json_schema.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace gem::chat {

using ojson = nlohmann::ordered_json;

namespace jsg {

enum class Kind : uint8_t { kObject, kArray, kString, kNumber, kLiteral, kAnyOf };

struct Property {
  int key = -1;    // literal node: the name as JSON text, quotes included
  int value = -1;  // the value's node
  bool required = false;
};

struct Node {
  Kind kind = Kind::kLiteral;
  std::vector<Property> props;  // kObject, in the schema's order
  int extra = -1;               // kObject: value node of undeclared keys; -1: none may appear
  int items = -1;               // kArray: the items' node
  int min_count = 0;            // kArray minItems, kString minLength (characters)
  int max_count = -1;           // kArray maxItems, kString maxLength; -1: no limit
  bool integer = false;         // kNumber
  std::string literal;          // kLiteral
  std::vector<int> options;     // kAnyOf
  std::string min_text;         // the shortest instance
};

// Phases of a frame. Every kind starts in kStart (whitespace may come before the value).
constexpr uint8_t kStart = 0;
// object
constexpr uint8_t kObjOpen = 1, kObjKey = 2, kObjColon = 3, kObjValue = 4, kObjAfter = 5,
                  kObjComma = 6;
// array
constexpr uint8_t kArrOpen = 1, kArrValue = 2, kArrAfter = 3, kArrComma = 4;
// string
constexpr uint8_t kStrBody = 1, kStrEscape = 2, kStrHex = 3, kStrUtf8 = 4;
// number
constexpr uint8_t kNumMinus = 1, kNumZero = 2, kNumInt = 3, kNumFrac0 = 4, kNumFrac = 5,
                  kNumExp0 = 6, kNumExpSign = 7, kNumExp = 8;
constexpr int kMaxIntDigits = 15, kMaxFracDigits = 15, kMaxExpDigits = 2;
// literal
constexpr uint8_t kLitBody = 1;

constexpr size_t kMaxMinText = 64 * 1024;  // bytes of the shortest instance of one node
constexpr size_t kMaxThreads = 256;        // readings kept open at once

bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

}  // namespace jsg

struct JsonGrammar {
  std::vector<jsg::Node> nodes;
  int root = 0;
  int key_string = -1;       // kString node for undeclared keys
  size_t max_growth = 0;     // JsonMatcher::max_growth_per_byte()
};

using jsg::Kind;
using jsg::Node;

JsonThread& JsonThread::operator=(const JsonThread& o) {
  depth = o.depth;
  ws = o.ws;
  std::memcpy(frames, o.frames, sizeof(JsonFrame) * o.depth);
  return *this;
}

bool JsonThread::operator==(const JsonThread& o) const {
  if (depth != o.depth || ws != o.ws) return false;
  for (int i = 0; i < depth; ++i) {
    if (!(frames[i] == o.frames[i])) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Compiling

namespace {

const char* type_name(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "a boolean";
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned:
    case ojson::value_t::number_float: return "a number";
    case ojson::value_t::string: return "a string";
    case ojson::value_t::array: return "an array";
    case ojson::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

std::string compact(const ojson& v) {
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// Keywords that constrain instances in ways the matcher cannot enforce.
constexpr const char* kUnsupported[] = {
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "pattern",
    "format", "oneOf", "allOf", "not", "if", "then", "else", "patternProperties",
    "propertyNames", "minProperties", "maxProperties", "uniqueItems", "contains",
    "minContains", "maxContains", "prefixItems", "additionalItems", "dependentRequired",
    "dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef", "contentSchema"};
constexpr const char* kSupportedList =
    "type, properties, required, additionalProperties, items, minItems, maxItems, minLength, "
    "maxLength, enum, const, anyOf, $ref";
// Assertions that may not sit beside anyOf/$ref (they would have to hold together).
constexpr const char* kAssertions[] = {"type", "properties", "required", "additionalProperties",
                                       "items", "minItems", "maxItems", "minLength", "maxLength",
                                       "enum", "const"};

class Compiler {
 public:
  explicit Compiler(const ojson& root) : root_(root) {}

  Result<int> compile(const ojson& s, const std::string& where, int depth);
  Status finish(int root);
  JsonGrammar g;

 private:
  Result<int> add(Node n, const std::string& where) {
    if (static_cast<int>(g.nodes.size()) >= kMaxSchemaNodes) {
      return errorf("%s: the schema needs more than %d nodes (properties, enum values, options); "
                    "simplify it", where.c_str(), kMaxSchemaNodes);
    }
    g.nodes.push_back(std::move(n));
    return static_cast<int>(g.nodes.size()) - 1;
  }
  Result<int> literal(const ojson& v, const std::string& where) {
    Node n;
    n.kind = Kind::kLiteral;
    n.literal = compact(v);
    if (n.literal.size() > static_cast<size_t>(kMaxSchemaLiteral)) {
      return errorf("%s: expected a value of at most %d bytes as JSON, got %zu", where.c_str(),
                    kMaxSchemaLiteral, n.literal.size());
    }
    return add(std::move(n), where);
  }
  Result<int> any(const std::string& where);
  Result<int> typed(const std::string& type, const ojson& s, const std::string& where, int depth);
  Result<int> object(const ojson& s, const std::string& where, int depth);
  Result<int> array(const ojson& s, const std::string& where, int depth);
  Result<int> reference(const std::string& ref, const std::string& where, int depth);
  Result<int> count_keyword(const ojson& s, const char* key, int max, const std::string& where,
                            int fallback);
  Result<std::string> min_text(int node, std::vector<uint8_t>& state);

  const ojson& root_;
  std::map<std::string, int> refs_;          // compiled $ref targets
  std::vector<std::string> active_refs_;     // $refs being compiled (recursion guard)
  int any_ = -1;
};

// The node for "any JSON value": anyOf(free-form object, array of any, string, number, true,
// false, null), shared by every schema position that accepts anything.
Result<int> Compiler::any(const std::string& where) {
  if (any_ >= 0) return any_;
  Node a;
  a.kind = Kind::kAnyOf;
  GEM_ASSIGN_OR_RETURN(any_, add(a, where));
  Node obj;
  obj.kind = Kind::kObject;
  obj.extra = any_;
  Node arr;
  arr.kind = Kind::kArray;
  arr.items = any_;
  Node str;
  str.kind = Kind::kString;
  Node num;
  num.kind = Kind::kNumber;
  std::vector<int> options;
  for (Node* n : {&obj, &arr, &str, &num}) {
    GEM_ASSIGN_OR_RETURN(int id, add(*n, where));
    options.push_back(id);
  }
  for (const ojson& v : {ojson(true), ojson(false), ojson(nullptr)}) {
    GEM_ASSIGN_OR_RETURN(int id, literal(v, where));
    options.push_back(id);
  }
  g.nodes[static_cast<size_t>(any_)].options = std::move(options);
  return any_;
}

Result<int> Compiler::count_keyword(const ojson& s, const char* key, int max,
                                    const std::string& where, int fallback) {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  const std::string w = where + "." + key;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return errorf("%s: expected a non-negative integer, got %s", w.c_str(),
                  it->is_number() ? "a negative or fractional number" : type_name(*it));
  }
  const int64_t v = it->get<int64_t>();
  if (max >= 0 && v > max) {
    return errorf("%s: expected at most %d, got %lld", w.c_str(), max, static_cast<long long>(v));
  }
  return static_cast<int>(std::min<int64_t>(v, 1 << 30));
}

Result<int> Compiler::compile(const ojson& s, const std::string& where, int depth) {
  if (depth > kMaxSchemaDepth) {
    return errorf("%s: expected subschemas nested at most %d deep, got deeper nesting",
                  where.c_str(), kMaxSchemaDepth);
  }
  if (s.is_boolean()) {
    if (s.get<bool>()) return any(where);
    return errorf("%s: the schema false accepts no value", where.c_str());
  }
  if (!s.is_object()) return errorf("%s: expected a schema object, got %s", where.c_str(), type_name(s));
  for (const char* k : kUnsupported) {
    if (s.contains(k)) {
      return errorf("%s.%s: the keyword \"%s\" is not supported by constrained decoding "
                    "(supported: %s)", where.c_str(), k, k, kSupportedList);
    }
  }
  auto sibling_assertion = [&]() -> const char* {
    for (const char* k : kAssertions) {
      if (s.contains(k)) return k;
    }
    return nullptr;
  };
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) return errorf("%s.$ref: expected a string, got %s", where.c_str(), type_name(*it));
    if (const char* k = sibling_assertion()) {
      return errorf("%s: \"%s\" beside \"$ref\" is not supported (move it into the referenced "
                    "schema)", where.c_str(), k);
    }
    return reference(it->get<std::string>(), where + ".$ref", depth);
  }
  if (auto it = s.find("anyOf"); it != s.end()) {
    const std::string w = where + ".anyOf";
    if (!it->is_array() || it->empty()) {
      return errorf("%s: expected a non-empty array of schemas, got %s", w.c_str(),
                    it->is_array() ? "an empty array" : type_name(*it));
    }
    if (it->size() > static_cast<size_t>(kMaxSchemaChoices)) {
      return errorf("%s: expected at most %d options, got %zu", w.c_str(), kMaxSchemaChoices, it->size());
    }
    if (const char* k = sibling_assertion()) {
      return errorf("%s: \"%s\" beside \"anyOf\" is not supported (move it into each option)",
                    where.c_str(), k);
    }
    Node n;
    n.kind = Kind::kAnyOf;
    for (size_t i = 0; i < it->size(); ++i) {
      GEM_ASSIGN_OR_RETURN(int o, compile((*it)[i], w + "[" + std::to_string(i) + "]", depth + 1));
      n.options.push_back(o);
    }
    return add(std::move(n), where);
  }

  // The listed types (none: any, or inferred from the keywords present).
  std::vector<std::string> types;
  if (auto it = s.find("type"); it != s.end()) {
    const std::string w = where + ".type";
    if (it->is_string()) {
      types.push_back(it->get<std::string>());
    } else if (it->is_array() && !it->empty()) {
      for (const ojson& t : *it) {
        if (!t.is_string()) return errorf("%s: expected type names (strings), got %s", w.c_str(), type_name(t));
        types.push_back(t.get<std::string>());
      }
    } else {
      return errorf("%s: expected a type name or a non-empty array of them, got %s", w.c_str(),
                    it->is_array() ? "an empty array" : type_name(*it));
    }
    static const char* kTypes[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    for (const std::string& t : types) {
      if (std::none_of(std::begin(kTypes), std::end(kTypes), [&](const char* k) { return t == k; })) {
        return errorf("%s: expected one of object, array, string, number, integer, boolean, null, "
                      "got \"%s\"", w.c_str(), t.substr(0, 64).c_str());
      }
    }
  }
  auto type_allows = [&](const ojson& v) {
    if (types.empty()) return true;
    for (const std::string& t : types) {
      if ((t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
          (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
          (t == "integer" && v.is_number_integer()) || (t == "boolean" && v.is_boolean()) ||
          (t == "null" && v.is_null())) {
        return true;
      }
    }
    return false;
  };

  // enum / const: the instance is one of the listed values, written as compact JSON.
  const bool has_enum = s.contains("enum"), has_const = s.contains("const");
  if (has_enum && has_const) {
    return errorf("%s: \"enum\" and \"const\" together are not supported (give one)", where.c_str());
  }
  if (has_enum || has_const) {
    const std::string w = where + (has_enum ? ".enum" : ".const");
    std::vector<const ojson*> values;
    if (has_const) {
      values.push_back(&s["const"]);
    } else {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) {
        return errorf("%s: expected a non-empty array of values, got %s", w.c_str(),
                      e.is_array() ? "an empty array" : type_name(e));
      }
      if (e.size() > static_cast<size_t>(kMaxSchemaChoices)) {
        return errorf("%s: expected at most %d values, got %zu", w.c_str(), kMaxSchemaChoices, e.size());
      }
      for (const ojson& v : e) values.push_back(&v);
    }
    Node n;
    n.kind = Kind::kAnyOf;
    for (size_t i = 0; i < values.size(); ++i) {
      if (!type_allows(*values[i])) continue;
      GEM_ASSIGN_OR_RETURN(int lit, literal(*values[i], has_enum ? w + "[" + std::to_string(i) + "]" : w));
      n.options.push_back(lit);
    }
    if (n.options.empty()) {
      return errorf("%s: no value has the schema's type, so no instance is valid", w.c_str());
    }
    if (n.options.size() == 1) return n.options[0];
    return add(std::move(n), where);
  }

  if (types.empty()) {
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return any(where);
    }
  }
  if (types.size() == 1) return typed(types[0], s, where, depth);
  Node n;
  n.kind = Kind::kAnyOf;
  for (const std::string& t : types) {
    GEM_ASSIGN_OR_RETURN(int o, typed(t, s, where, depth));
    n.options.push_back(o);
  }
  return add(std::move(n), where);
}

Result<int> Compiler::typed(const std::string& type, const ojson& s, const std::string& where,
                            int depth) {
  if (type == "object") return object(s, where, depth);
  if (type == "array") return array(s, where, depth);
  Node n;
  if (type == "string") {
    n.kind = Kind::kString;
    GEM_ASSIGN_OR_RETURN(n.min_count, count_keyword(s, "minLength", kMaxSchemaMinimum, where, 0));
    GEM_ASSIGN_OR_RETURN(n.max_count, count_keyword(s, "maxLength", -1, where, -1));
    if (n.max_count > 65535) n.max_count = -1;  // beyond what a reply can hold: no limit
    if (n.max_count >= 0 && n.max_count < n.min_count) {
      return errorf("%s: maxLength %d is below minLength %d, so no string is valid", where.c_str(),
                    n.max_count, n.min_count);
    }
    return add(std::move(n), where);
  }
  if (type == "number" || type == "integer") {
    n.kind = Kind::kNumber;
    n.integer = type == "integer";
    return add(std::move(n), where);
  }
  if (type == "boolean") {
    n.kind = Kind::kAnyOf;
    GEM_ASSIGN_OR_RETURN(int t, literal(ojson(true), where));
    GEM_ASSIGN_OR_RETURN(int f, literal(ojson(false), where));
    n.options = {t, f};
    return add(std::move(n), where);
  }
  return literal(ojson(nullptr), where);  // "null" (compile() checked the name)
}

Result<int> Compiler::object(const ojson& s, const std::string& where, int depth) {
  Node n;
  n.kind = Kind::kObject;
  std::string undeclared_required;  // a required name missing from properties
  if (auto it = s.find("properties"); it != s.end()) {
    const std::string w = where + ".properties";
    if (!it->is_object()) return errorf("%s: expected an object of schemas, got %s", w.c_str(), type_name(*it));
    if (it->size() > static_cast<size_t>(kMaxSchemaChoices)) {
      return errorf("%s: expected at most %d properties, got %zu", w.c_str(), kMaxSchemaChoices, it->size());
    }
    for (auto p = it->begin(); p != it->end(); ++p) {
      jsg::Property prop;
      GEM_ASSIGN_OR_RETURN(prop.key, literal(ojson(p.key()), w));
      GEM_ASSIGN_OR_RETURN(prop.value, compile(p.value(), w + "." + p.key().substr(0, 64), depth + 1));
      n.props.push_back(prop);
    }
  }
  if (auto it = s.find("required"); it != s.end()) {
    const std::string w = where + ".required";
    if (!it->is_array()) return errorf("%s: expected an array of property names, got %s", w.c_str(), type_name(*it));
    if (it->size() > static_cast<size_t>(kMaxSchemaChoices)) {
      return errorf("%s: expected at most %d names, got %zu", w.c_str(), kMaxSchemaChoices, it->size());
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const ojson& name = (*it)[i];
      if (!name.is_string()) {
        return errorf("%s[%zu]: expected a property name (a string), got %s", w.c_str(), i, type_name(name));
      }
      const std::string key = compact(name);
      auto found = std::find_if(n.props.begin(), n.props.end(), [&](const jsg::Property& p) {
        return g.nodes[static_cast<size_t>(p.key)].literal == key;
      });
      if (found != n.props.end()) {
        found->required = true;
        continue;
      }
      // Required but not described: any value (refused below if undeclared keys are not allowed).
      undeclared_required = name.get<std::string>();
      jsg::Property prop;
      GEM_ASSIGN_OR_RETURN(prop.key, literal(name, w));
      GEM_ASSIGN_OR_RETURN(prop.value, any(w));
      prop.required = true;
      n.props.push_back(prop);
    }
  }
  // Undeclared keys: only in an object that declares none (then any key, with values of the
  // additionalProperties schema). Beside declared properties they are never generated, which
  // every additionalProperties value allows.
  int extra = -1;
  bool extras_allowed = true;
  if (auto it = s.find("additionalProperties"); it != s.end()) {
    const std::string w = where + ".additionalProperties";
    if (it->is_boolean()) {
      extras_allowed = it->get<bool>();
      if (extras_allowed) {
        GEM_ASSIGN_OR_RETURN(extra, any(w));
      }
    } else if (it->is_object()) {
      GEM_ASSIGN_OR_RETURN(extra, compile(*it, w, depth + 1));
    } else {
      return errorf("%s: expected a boolean or a schema, got %s", w.c_str(), type_name(*it));
    }
  } else {
    GEM_ASSIGN_OR_RETURN(extra, any(where));
  }
  if (!extras_allowed && !undeclared_required.empty()) {
    return errorf("%s.required: \"%s\" is required but not in properties, and "
                  "additionalProperties is false, so no object is valid", where.c_str(),
                  undeclared_required.substr(0, 64).c_str());
  }
  n.extra = n.props.empty() && extras_allowed ? extra : -1;
  return add(std::move(n), where);
}

Result<int> Compiler::array(const ojson& s, const std::string& where, int depth) {
  Node n;
  n.kind = Kind::kArray;
  if (auto it = s.find("items"); it != s.end()) {
    if (it->is_array()) {
      return errorf("%s.items: expected a schema, got an array (tuple validation is not supported)",
                    where.c_str());
    }
    GEM_ASSIGN_OR_RETURN(n.items, compile(*it, where + ".items", depth + 1));
  } else {
    GEM_ASSIGN_OR_RETURN(n.items, any(where));
  }
  GEM_ASSIGN_OR_RETURN(n.min_count, count_keyword(s, "minItems", kMaxSchemaMinimum, where, 0));
  GEM_ASSIGN_OR_RETURN(n.max_count, count_keyword(s, "maxItems", -1, where, -1));
  if (n.max_count >= 0 && n.max_count < n.min_count) {
    return errorf("%s: maxItems %d is below minItems %d, so no array is valid", where.c_str(),
                  n.max_count, n.min_count);
  }
  if (n.max_count > 65535) n.max_count = -1;
  return add(std::move(n), where);
}

Result<int> Compiler::reference(const std::string& ref, const std::string& where, int depth) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  if (ref.size() < 2 || ref.rfind("#/", 0) != 0) {
    return errorf("%s: expected a reference inside this schema such as \"#/$defs/Name\", got \"%s\"",
                  where.c_str(), ref.substr(0, 100).c_str());
  }
  if (std::find(active_refs_.begin(), active_refs_.end(), ref) != active_refs_.end()) {
    return errorf("%s: \"%s\" refers to itself; recursive schemas are not supported",
                  where.c_str(), ref.substr(0, 100).c_str());
  }
  const ojson* target = nullptr;
  try {
    const ojson::json_pointer ptr(ref.substr(1));
    if (root_.contains(ptr)) target = &root_.at(ptr);
  } catch (const std::exception&) {
    target = nullptr;
  }
  if (target == nullptr) {
    return errorf("%s: \"%s\" names nothing in the schema", where.c_str(), ref.substr(0, 100).c_str());
  }
  active_refs_.push_back(ref);
  Result<int> id = compile(*target, where + "(" + ref.substr(0, 100) + ")", depth + 1);
  active_refs_.pop_back();
  if (id.ok()) refs_[ref] = *id;
  return id;
}

// The shortest instance of each node, computed once the graph is complete. `state`: 0 not yet,
// 1 in progress (a cycle: only "any" closes one, through an empty object or array), 2 done.
Result<std::string> Compiler::min_text(int id, std::vector<uint8_t>& state) {
  Node& n = g.nodes[static_cast<size_t>(id)];
  if (state[static_cast<size_t>(id)] == 2) return n.min_text;
  if (state[static_cast<size_t>(id)] == 1) return errorf("cycle");
  state[static_cast<size_t>(id)] = 1;
  std::string out;
  switch (n.kind) {
    case Kind::kLiteral: out = n.literal; break;
    case Kind::kNumber: out = "0"; break;
    case Kind::kString: out = "\"" + std::string(static_cast<size_t>(n.min_count), 'a') + "\""; break;
    case Kind::kArray: {
      out = "[";
      if (n.min_count > 0) {
        GEM_ASSIGN_OR_RETURN(std::string item, min_text(n.items, state));
        for (int i = 0; i < n.min_count && out.size() <= jsg::kMaxMinText; ++i) {
          if (i > 0) out += ',';
          out += item;
        }
      }
      out += ']';
      break;
    }
    case Kind::kObject: {
      out = "{";
      bool first = true;
      for (const jsg::Property& p : g.nodes[static_cast<size_t>(id)].props) {
        if (!p.required) continue;
        GEM_ASSIGN_OR_RETURN(std::string v, min_text(p.value, state));
        if (!first) out += ',';
        first = false;
        out += g.nodes[static_cast<size_t>(p.key)].literal + ":" + v;
        if (out.size() > jsg::kMaxMinText) break;
      }
      out += '}';
      break;
    }
    case Kind::kAnyOf: {
      bool found = false;
      for (int o : g.nodes[static_cast<size_t>(id)].options) {
        Result<std::string> t = min_text(o, state);
        if (!t.ok()) continue;  // a cycle through this option; another one is shorter
        if (!found || t->size() < out.size()) out = *t;
        found = true;
      }
      if (!found) return errorf("cycle");
      break;
    }
  }
  Node& m = g.nodes[static_cast<size_t>(id)];  // (the vector did not grow, but stay explicit)
  if (out.size() > jsg::kMaxMinText) {
    return errorf("the schema's smallest valid instance is longer than %zu bytes", jsg::kMaxMinText);
  }
  m.min_text = out;
  state[static_cast<size_t>(id)] = 2;
  return m.min_text;
}

Status Compiler::finish(int root) {
  g.root = root;
  Node key;
  key.kind = Kind::kString;
  GEM_ASSIGN_OR_RETURN(g.key_string, add(key, "schema"));
  std::vector<uint8_t> state(g.nodes.size(), 0);
  size_t longest = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Result<std::string> t = min_text(static_cast<int>(i), state);
    if (!t.ok()) {
      return errorf("schema: %s", t.message() == "cycle" ? "no finite instance exists"
                                                         : t.message().c_str());
    }
    longest = std::max(longest, t->size());
  }
  // One byte opens at most one value (its shortest instance, beside a key of at most `longest`
  // bytes) or starts one more required member or item; a few bytes of punctuation around.
  g.max_growth = 2 * longest + 8;
  return ok_status();
}

}  // namespace

Result<std::shared_ptr<const JsonGrammar>> compile_json_schema(const ojson& schema,
                                                               const std::string& where) {
  Compiler c(schema);
  GEM_ASSIGN_OR_RETURN(int root, c.compile(schema, where, 0));
  if (Status st = c.finish(root); !st.ok()) return errorf("%s: %s", where.c_str(), st.message().c_str());
  return std::shared_ptr<const JsonGrammar>(std::make_shared<JsonGrammar>(std::move(c.g)));
}

std::shared_ptr<const JsonGrammar> json_object_grammar() {
  static const std::shared_ptr<const JsonGrammar> g = [] {
    Result<std::shared_ptr<const JsonGrammar>> r =
        compile_json_schema(ojson{{"type", "object"}}, "response_format");
    return *r;
  }();
  return g;
}

// ---------------------------------------------------------------------------------------------
// Matching

namespace {

using Threads = JsonMatcher::Threads;
using namespace jsg;

class Stepper {
 public:
  explicit Stepper(const JsonGrammar& g) : g_(g) {}

  // Pushes `node` (an anyOf opens one reading per option) in its start phase.
  void push(JsonThread t, int node, Threads& out) const {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    if (n.kind == Kind::kAnyOf) {
      for (int o : n.options) push(t, o, out);
      return;
    }
    if (t.depth >= JsonThread::kMaxFrames) return;
    t.frames[t.depth++] = JsonFrame{node, kStart, 0, 0, 0, 0};
    out.push_back(t);
  }

  // Pushes `node` and reads `c` as its first byte.
  void push_and_read(const JsonThread& t, int node, uint8_t c, Threads& out) const {
    Threads started;
    push(t, node, started);
    for (JsonThread& s : started) read(s, c, out);
  }

  // The frame below the top finished its child: move it on.
  void child_done(JsonFrame& f) const {
    const Node& n = g_.nodes[static_cast<size_t>(f.node)];
    if (n.kind == Kind::kObject) {
      if (f.phase == kObjKey) {
        f.phase = kObjColon;
      } else {  // kObjValue
        f.phase = kObjAfter;
        if (f.aux >= 0) f.pos = f.aux + 1;
      }
    } else {  // kArray, kArrValue
      if (f.count < 0xFFFF) f.count++;
      f.phase = kArrAfter;
    }
  }

  void pop(JsonThread& t) const {
    t.depth--;
    if (t.depth > 0) child_done(t.frames[t.depth - 1]);
  }

  static bool required_from(const Node& n, int pos) {
    for (size_t j = static_cast<size_t>(pos); j < n.props.size(); ++j) {
      if (n.props[j].required) return true;
    }
    return false;
  }
  static bool has_next_key(const Node& n, int pos) {
    return n.extra >= 0 || static_cast<size_t>(pos) < n.props.size();
  }

  // After the opening quote of a key: one reading per candidate property (the next declared
  // ones up to and including the first required one), or a free key string.
  void start_key(const JsonThread& t, Threads& out) const {
    const JsonFrame& f = t.frames[t.depth - 1];
    const Node& n = g_.nodes[static_cast<size_t>(f.node)];
    if (t.depth >= JsonThread::kMaxFrames) return;
    if (n.extra >= 0) {
      JsonThread k = t;
      k.frames[k.depth - 1].phase = kObjKey;
      k.frames[k.depth - 1].aux = -1;
      k.frames[k.depth++] = JsonFrame{g_.key_string, kStrBody, 0, 0, 0, 0};
      out.push_back(k);
      return;
    }
    for (size_t j = static_cast<size_t>(f.pos); j < n.props.size(); ++j) {
      JsonThread k = t;
      k.frames[k.depth - 1].phase = kObjKey;
      k.frames[k.depth - 1].aux = static_cast<int32_t>(j);
      k.frames[k.depth++] = JsonFrame{n.props[j].key, kLitBody, 0, 0, 1, 0};
      out.push_back(k);
      if (n.props[j].required) break;
    }
  }

  // Reads byte `c` into thread `t` (a copy this call may change); appends the resulting
  // readings to `out`.
  void read(JsonThread& t, uint8_t c, Threads& out) const {
    for (;;) {
      if (t.depth == 0) return;  // a whole value was read: nothing may follow
      JsonFrame& f = t.frames[t.depth - 1];
      const Node& n = g_.nodes[static_cast<size_t>(f.node)];
      auto whitespace = [&] {
        if (++t.ws > kMaxJsonWhitespace) return;
        out.push_back(t);
      };
      auto consumed = [&] {
        t.ws = 0;
        out.push_back(t);
      };
      auto done = [&] {
        t.ws = 0;
        pop(t);
        out.push_back(t);
      };
      switch (n.kind) {
        case Kind::kObject:
          switch (f.phase) {
            case kStart:
              if (is_ws(c)) return whitespace();
              if (c != '{' || t.depth > kMaxJsonNesting) return;
              f.phase = kObjOpen;
              f.pos = 0;
              return consumed();
            case kObjOpen:
            case kObjComma:
              if (is_ws(c)) return whitespace();
              if (c == '}' && f.phase == kObjOpen && !required_from(n, 0)) return done();
              if (c != '"') return;
              t.ws = 0;
              return start_key(t, out);
            case kObjColon: {
              if (is_ws(c)) return whitespace();
              if (c != ':') return;
              f.phase = kObjValue;
              const int value = f.aux >= 0 ? n.props[static_cast<size_t>(f.aux)].value : n.extra;
              t.ws = 0;
              return push(t, value, out);
            }
            case kObjAfter:
              if (is_ws(c)) return whitespace();
              if (c == ',' && has_next_key(n, f.pos)) {
                f.phase = kObjComma;
                return consumed();
              }
              if (c == '}' && !required_from(n, f.pos)) return done();
              return;
            default:
              return;  // a child runs above this frame
          }
        case Kind::kArray:
          switch (f.phase) {
            case kStart:
              if (is_ws(c)) return whitespace();
              if (c != '[' || t.depth > kMaxJsonNesting) return;
              f.phase = kArrOpen;
              f.count = 0;
              return consumed();
            case kArrOpen:
            case kArrComma:
              if (is_ws(c)) return whitespace();
              if (c == ']' && f.phase == kArrOpen && n.min_count == 0) return done();
              if (n.max_count == 0 || c == ']' || c == ',') return;
              f.phase = kArrValue;
              t.ws = 0;
              return push_and_read(t, n.items, c, out);
            case kArrAfter:
              if (is_ws(c)) return whitespace();
              if (c == ',' && (n.max_count < 0 || f.count < n.max_count)) {
                f.phase = kArrComma;
                return consumed();
              }
              if (c == ']' && f.count >= n.min_count) return done();
              return;
            default:
              return;
          }
        case Kind::kString: {
          const bool at_max = n.max_count >= 0 && f.count >= n.max_count;
          switch (f.phase) {
            case kStart:
              if (is_ws(c)) return whitespace();
              if (c != '"') return;
              f.phase = kStrBody;
              f.count = 0;
              return consumed();
            case kStrBody:
              if (c == '"') {
                if (f.count < n.min_count) return;
                return done();
              }
              if (c < 0x20 || at_max) return;
              if (f.count < 0xFFFF) f.count++;
              if (c == '\\') {
                f.phase = kStrEscape;
              } else if (c >= 0x80) {
                if (c >= 0xC2 && c <= 0xDF) {
                  f.sub = 1;
                } else if (c >= 0xE0 && c <= 0xEF) {
                  f.sub = 2;
                } else if (c >= 0xF0 && c <= 0xF4) {
                  f.sub = 3;
                } else {
                  return;
                }
                f.aux = c;
                f.phase = kStrUtf8;
              }
              return consumed();
            case kStrEscape:
              if (c == 'u') {
                f.phase = kStrHex;
                f.sub = 4;
                f.aux = 0;
                return consumed();
              }
              if (std::strchr("\"\\/bfnrt", c) == nullptr || c == 0) return;
              f.phase = kStrBody;
              return consumed();
            case kStrHex:
              if (!is_hex(c)) return;
              // No surrogates (\uD800-\uDFFF): a lone one does not parse.
              if (f.sub == 4 && (c == 'd' || c == 'D')) f.aux = 1;
              if (f.sub == 3 && f.aux == 1 && !(c >= '0' && c <= '7')) return;
              if (--f.sub == 0) {
                f.phase = kStrBody;
                f.aux = 0;
              }
              return consumed();
            case kStrUtf8: {
              uint8_t lo = 0x80, hi = 0xBF;
              if (f.aux == 0xE0) lo = 0xA0;                     // no overlong 3-byte forms
              if (f.aux == 0xED) hi = 0x9F;                     // no surrogates
              if (f.aux == 0xF0) lo = 0x90;                     // no overlong 4-byte forms
              if (f.aux == 0xF4) hi = 0x8F;                     // nothing past U+10FFFF
              if (c < lo || c > hi) return;
              f.aux = 0;
              if (--f.sub == 0) f.phase = kStrBody;
              return consumed();
            }
            default:
              return;
          }
        }
        case Kind::kNumber: {
          const bool dot_ok = !n.integer;
          switch (f.phase) {
            case kStart:
              if (is_ws(c)) return whitespace();
              if (c == '-') {
                f.phase = kNumMinus;
                return consumed();
              }
              [[fallthrough]];
            case kNumMinus:
              if (c == '0') {
                f.phase = kNumZero;
                return consumed();
              }
              if (c >= '1' && c <= '9') {
                f.phase = kNumInt;
                f.sub = 1;
                return consumed();
              }
              return;
            case kNumZero:
            case kNumInt:
              if (is_digit(c)) {
                if (f.phase == kNumZero || f.sub >= kMaxIntDigits) return;
                f.sub++;
                return consumed();
              }
              if (c == '.' && dot_ok) {
                f.phase = kNumFrac0;
                return consumed();
              }
              if ((c == 'e' || c == 'E') && dot_ok) {
                f.phase = kNumExp0;
                return consumed();
              }
              break;  // the number ends before `c`
            case kNumFrac0:
              if (!is_digit(c)) return;
              f.phase = kNumFrac;
              f.sub = 1;
              return consumed();
            case kNumFrac:
              if (is_digit(c)) {
                if (f.sub >= kMaxFracDigits) return;
                f.sub++;
                return consumed();
              }
              if (c == 'e' || c == 'E') {
                f.phase = kNumExp0;
                return consumed();
              }
              break;
            case kNumExp0:
              if (c == '+' || c == '-') {
                f.phase = kNumExpSign;
                return consumed();
              }
              [[fallthrough]];
            case kNumExpSign:
              if (!is_digit(c)) return;
              f.phase = kNumExp;
              f.sub = 1;
              return consumed();
            case kNumExp:
              if (is_digit(c)) {
                if (f.sub >= kMaxExpDigits) return;
                f.sub++;
                return consumed();
              }
              break;
            default:
              return;
          }
          // The number is complete; `c` belongs to the enclosing value.
          pop(t);
          continue;
        }
        case Kind::kLiteral: {
          const std::string& lit = n.literal;
          if (f.phase == kStart) {
            if (is_ws(c)) return whitespace();
            f.phase = kLitBody;
            f.pos = 0;
          }
          if (static_cast<size_t>(f.pos) >= lit.size() || static_cast<uint8_t>(lit[static_cast<size_t>(f.pos)]) != c) return;
          if (static_cast<size_t>(++f.pos) == lit.size()) return done();
          return consumed();
        }
        case Kind::kAnyOf:
          return;  // never on the stack: push() expands it
      }
      return;
    }
  }

  // The bytes that finish frame `f` (its children already finished).
  void finish(const JsonFrame& f, std::string& out) const {
    const Node& n = g_.nodes[static_cast<size_t>(f.node)];
    auto min = [&](int id) -> const std::string& { return g_.nodes[static_cast<size_t>(id)].min_text; };
    auto key = [&](const Property& p) -> const std::string& { return min(p.key); };
    auto rest_required = [&](size_t from) {
      for (size_t j = from; j < n.props.size(); ++j) {
        if (n.props[j].required) out += "," + key(n.props[j]) + ":" + min(n.props[j].value);
      }
    };
    switch (n.kind) {
      case Kind::kObject:
        switch (f.phase) {
          case kStart: out += n.min_text; return;
          case kObjOpen: {
            bool first = true;
            for (const Property& p : n.props) {
              if (!p.required) continue;
              if (!first) out += ',';
              first = false;
              out += key(p) + ":" + min(p.value);
            }
            out += '}';
            return;
          }
          case kObjComma: {
            if (n.extra >= 0) {
              out += "\"\":" + min(n.extra) + "}";
              return;
            }
            size_t j = static_cast<size_t>(f.pos);
            for (size_t k = j; k < n.props.size(); ++k) {
              if (n.props[k].required) {
                j = k;
                break;
              }
            }
            out += key(n.props[j]) + ":" + min(n.props[j].value);
            rest_required(j + 1);
            out += '}';
            return;
          }
          case kObjColon:
            out += ":";
            if (f.aux >= 0) {
              out += min(n.props[static_cast<size_t>(f.aux)].value);
              rest_required(static_cast<size_t>(f.aux) + 1);
            } else {
              out += min(n.extra);
            }
            out += '}';
            return;
          case kObjAfter:
            rest_required(static_cast<size_t>(f.pos));
            out += '}';
            return;
          default:
            return;
        }
      case Kind::kArray: {
        auto items = [&](int k) {
          for (int i = 0; i < k; ++i) out += (i > 0 ? "," : "") + min(n.items);
        };
        switch (f.phase) {
          case kStart: out += n.min_text; return;
          case kArrOpen: items(n.min_count); out += ']'; return;
          case kArrAfter:
            for (int i = f.count; i < n.min_count; ++i) out += "," + min(n.items);
            out += ']';
            return;
          case kArrComma:
            out += min(n.items);
            for (int i = f.count + 1; i < n.min_count; ++i) out += "," + min(n.items);
            out += ']';
            return;
          default:
            return;
        }
      }
      case Kind::kString: {
        if (f.phase == kStart) {
          out += n.min_text;
          return;
        }
        if (f.phase == kStrEscape) out += 'n';
        if (f.phase == kStrHex) out += std::string(f.sub, '0');
        if (f.phase == kStrUtf8) {
          for (int i = 0; i < f.sub; ++i) {
            uint8_t b = 0x80;
            if (i == 0 && f.aux == 0xE0) b = 0xA0;
            if (i == 0 && f.aux == 0xF0) b = 0x90;
            out += static_cast<char>(b);
          }
        }
        for (int i = f.count; i < n.min_count; ++i) out += 'a';
        out += '"';
        return;
      }
      case Kind::kNumber:
        if (f.phase == kStart || f.phase == kNumMinus || f.phase == kNumFrac0 ||
            f.phase == kNumExp0 || f.phase == kNumExpSign) {
          out += '0';
        }
        return;
      case Kind::kLiteral:
        out += f.phase == kStart ? n.literal : n.literal.substr(static_cast<size_t>(f.pos));
        return;
      case Kind::kAnyOf:
        return;
    }
  }

  std::string completion(const JsonThread& thread) const {
    std::string out;
    JsonThread t = thread;
    for (int i = t.depth - 1; i >= 0; --i) {
      if (i < t.depth - 1) child_done(t.frames[i]);
      finish(t.frames[i], out);
    }
    return out;
  }

  bool accepting(const JsonThread& t) const {
    if (t.depth == 0) return true;
    if (t.depth > 1) return false;
    const JsonFrame& f = t.frames[0];
    return g_.nodes[static_cast<size_t>(f.node)].kind == Kind::kNumber &&
           (f.phase == kNumZero || f.phase == kNumInt || f.phase == kNumFrac || f.phase == kNumExp);
  }

 private:
  const JsonGrammar& g_;
};

void dedupe(Threads& ts) {
  if (ts.size() < 2) return;
  size_t n = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    bool seen = false;
    for (size_t j = 0; j < n && !seen; ++j) seen = ts[j] == ts[i];
    if (!seen) {
      if (n != i) ts[n] = ts[i];
      ++n;
    }
  }
  ts.resize(std::min(n, kMaxThreads));
}

}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar) : grammar_(std::move(grammar)) {
  Stepper(*grammar_).push(JsonThread(), grammar_->root, threads_);
}

void JsonMatcher::step(const Threads& in, uint8_t c, Threads& out) const {
  out.clear();
  const Stepper s(*grammar_);
  for (const JsonThread& t : in) {
    JsonThread copy = t;
    s.read(copy, c, out);
  }
  dedupe(out);
}

bool JsonMatcher::feed(std::string_view bytes) {
  Threads cur = threads_, next;
  for (char ch : bytes) {
    step(cur, static_cast<uint8_t>(ch), next);
    if (next.empty()) return false;
    std::swap(cur, next);
  }
  threads_ = std::move(cur);
  return true;
}

bool JsonMatcher::accepts(std::string_view bytes) const {
  JsonMatcher copy = *this;
  return copy.feed(bytes);
}

bool JsonMatcher::accepting() const {
  const Stepper s(*grammar_);
  return std::any_of(threads_.begin(), threads_.end(), [&](const JsonThread& t) { return s.accepting(t); });
}

bool JsonMatcher::finished() const {
  return !threads_.empty() &&
         std::all_of(threads_.begin(), threads_.end(), [](const JsonThread& t) { return t.depth == 0; });
}

std::string JsonMatcher::shortest_completion() const {
  const Stepper s(*grammar_);
  std::string best;
  bool found = false;
  for (const JsonThread& t : threads_) {
    std::string c = s.completion(t);
    if (!found || c.size() < best.size()) best = std::move(c);
    found = true;
  }
  return best;
}

size_t JsonMatcher::completion_size(const Threads& threads) const {
  const Stepper s(*grammar_);
  size_t best = SIZE_MAX;
  for (const JsonThread& t : threads) best = std::min(best, s.completion(t).size());
  return best;
}

size_t JsonMatcher::max_growth_per_byte() const { return grammar_->max_growth; }

bool JsonMatcher::in_plain_string(int* max_chars) const {
  // Every reading inside a string body: plain text keeps each one there (its count grows), so
  // a token of plain text is allowed when some reading has room for its characters.
  if (threads_.empty()) return false;
  int room = 0;
  for (const JsonThread& t : threads_) {
    if (t.depth == 0) return false;
    const JsonFrame& f = t.frames[t.depth - 1];
    const Node& n = grammar_->nodes[static_cast<size_t>(f.node)];
    if (n.kind != Kind::kString || f.phase != jsg::kStrBody) return false;
    if (n.max_count < 0) {
      room = -1;
    } else if (room >= 0) {
      room = std::max(room, n.max_count - static_cast<int>(f.count));
    }
  }
  *max_chars = room;
  return true;
}

}  // namespace gem::chat

// The JSON Schema compiler and the byte-level matcher (json_schema.h). A schema becomes a graph
// of six node kinds (object, array, string, number, literal, anyOf); the matcher keeps one stack
// of frames per open reading and advances every reading by each byte, exactly like a pushdown
// automaton read nondeterministically (the stacks of llama.cpp's grammar sampler, by the same
// idea). A literal is a value or key spelled out as compact JSON (enum, const, true, false,
// null, declared property names).
#include "chat/json_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <set>

#include "chat/byte_dfa.h"

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
  int dfa = -1;                 // kString: the content's automaton (pattern, format, lengths
                                // with either); kNumber: the bounds' automaton (JsonGrammar::dfas)
  std::string min_text;         // the shortest instance
  bool viable = false;          // some finite instance exists (else never entered)
  int frames = 0;               // containers the shortest instance nests (this one included)
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
// number (kNumDfa: reading a bounded number's automaton, the state in JsonFrame::pos)
constexpr uint8_t kNumDfa = 9;
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
  std::vector<ByteDfa> dfas;
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
    "not", "if", "then", "else", "patternProperties", "propertyNames",
    "minProperties", "maxProperties", "uniqueItems", "contains", "minContains", "maxContains",
    "prefixItems", "additionalItems", "dependentRequired", "dependentSchemas", "dependencies",
    "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", "contentSchema"};
constexpr const char* kSupportedList =
    "type, properties, required, additionalProperties, items, minItems, maxItems, minLength, "
    "maxLength, pattern, format, minimum, maximum, exclusiveMinimum, exclusiveMaximum, "
    "multipleOf (integers), enum, const, anyOf, oneOf, allOf, $ref";
// Keywords that assert something of an instance (the rest are annotations or combinators).
constexpr const char* kAssertions[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "enum", "const"};
constexpr const char* kAnnotations[] = {"title", "description", "default", "examples", "$schema",
                                        "$id", "$comment", "deprecated", "readOnly", "writeOnly",
                                        "$defs", "definitions", "$anchor", "$vocabulary"};
bool is_assertion(const std::string& k) {
  return std::any_of(std::begin(kAssertions), std::end(kAssertions), [&](const char* a) { return k == a; });
}
bool is_annotation(const std::string& k) {
  return std::any_of(std::begin(kAnnotations), std::end(kAnnotations), [&](const char* a) { return k == a; });
}

// A JSON number as ByteDfa::Bound digits (exact for integers; a float by its shortest
// round-trip spelling, which is what a validator's f64 holds).
ByteDfa::Bound bound_of(const ojson& v, bool exclusive) {
  ByteDfa::Bound b;
  b.present = true;
  b.exclusive = exclusive;
  std::string text;
  if (v.is_number_unsigned()) {
    text = std::to_string(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    text = std::to_string(v.get<int64_t>());
  } else {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v.get<double>());
    text.assign(buf, r.ptr);
  }
  if (!text.empty() && text[0] == '-') {
    b.negative = true;
    text.erase(0, 1);
  }
  int exp = 0;
  if (size_t e = text.find_first_of("eE"); e != std::string::npos) {
    exp = std::stoi(text.substr(e + 1));
    text.resize(e);
  }
  std::string digits = text;
  size_t point = digits.find('.');
  if (point == std::string::npos) {
    point = digits.size();
  } else {
    digits.erase(point, 1);
  }
  // value = 0.digits × 10^(point + exp)
  const long long int_len = static_cast<long long>(point) + exp;
  if (int_len <= 0) {
    b.frac_digits = std::string(static_cast<size_t>(-int_len), '0') + digits;
  } else if (static_cast<size_t>(int_len) >= digits.size()) {
    b.int_digits = digits + std::string(static_cast<size_t>(int_len) - digits.size(), '0');
  } else {
    b.int_digits = digits.substr(0, static_cast<size_t>(int_len));
    b.frac_digits = digits.substr(static_cast<size_t>(int_len));
  }
  b.int_digits.erase(0, std::min(b.int_digits.find_first_not_of('0'), b.int_digits.size()));
  while (!b.frac_digits.empty() && b.frac_digits.back() == '0') b.frac_digits.pop_back();
  if (b.int_digits.empty() && b.frac_digits.empty()) b.negative = false;
  return b;
}

// Type sets as bits (an integral number is both kInt and a number; kFrac: other numbers).
enum : uint8_t { kTObject = 1, kTArray = 2, kTString = 4, kTInt = 8, kTFrac = 16, kTBool = 32, kTNull = 64, kTAll = 127 };
uint8_t type_bits(const std::string& t) {
  if (t == "object") return kTObject;
  if (t == "array") return kTArray;
  if (t == "string") return kTString;
  if (t == "number") return kTInt | kTFrac;
  if (t == "integer") return kTInt;
  if (t == "boolean") return kTBool;
  if (t == "null") return kTNull;
  return 0;
}
uint8_t value_bits(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::object: return kTObject;
    case ojson::value_t::array: return kTArray;
    case ojson::value_t::string: return kTString;
    case ojson::value_t::boolean: return kTBool;
    case ojson::value_t::null: return kTNull;
    case ojson::value_t::number_float: {
      const double d = v.get<double>();
      return std::floor(d) == d ? kTInt : kTFrac;
    }
    default: return kTInt;
  }
}

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
  Result<int> add_dfa(ByteDfa d, const std::string& where) {
    dfa_states_ += d.n_states();
    if (dfa_states_ > kMaxSchemaDfaStates) {
      return errorf("%s: the schema's patterns, formats and bounds need more than %d automaton "
                    "states in all; simplify them", where.c_str(), kMaxSchemaDfaStates);
    }
    g.dfas.push_back(std::move(d));
    return static_cast<int>(g.dfas.size()) - 1;
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
  Result<int> string(const ojson& s, const std::string& where);
  Result<int> number(const ojson& s, bool integer, const std::string& where);
  Result<int> object(const ojson& s, const std::string& where, int depth);
  Result<int> array(const ojson& s, const std::string& where, int depth);
  Result<int> reference(const std::string& ref, const std::string& where, int depth);
  Result<int> options(const ojson& list, const char* key, const std::string& where, int depth);
  Result<int> conjunction(const ojson& s, const std::string& where, int depth);
  Result<const ojson*> resolve(const ojson& ref, const std::string& where);
  Status flatten(const ojson& s, const std::string& where, int depth,
                 std::vector<std::pair<const ojson*, std::string>>& plain,
                 std::vector<std::pair<const ojson*, std::string>>& choices);
  Result<ojson> merge(const std::vector<std::pair<const ojson*, std::string>>& parts,
                      const std::string& where);
  Result<std::vector<const ojson*>> admitted(const ojson& s, std::vector<const ojson*> values,
                                             const std::string& where, int depth);
  Status check_exclusive(const std::vector<int>& opts, const std::vector<const ojson*>& raws,
                         const std::string& where);
  bool rejects(int node, const ojson& schema, int depth);
  Result<int> count_keyword(const ojson& s, const char* key, int max, const std::string& where,
                            int fallback);
  const ojson& own(ojson v, bool merged) {
    owned_.push_back(std::move(v));
    if (merged) merged_.insert(&owned_.back());
    return owned_.back();
  }

  const ojson& root_;
  std::map<std::string, int> refs_;  // $ref targets: a node standing for each (cycles allowed)
  std::deque<ojson> owned_;          // schemas this compiler made (merged allOf parts, options)
  std::set<const ojson*> merged_;    // of them, merges: "pattern"/"format" may be arrays there
  int dfa_states_ = 0;
  int n_patterns_ = 0;
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
  // Combinators: one alone compiles directly; with others or beside assertions, the schema is
  // the conjunction of its parts (allOf), merged.
  const bool has_ref = s.contains("$ref"), has_all = s.contains("allOf"),
             has_any = s.contains("anyOf"), has_one = s.contains("oneOf");
  bool has_assertion = false;
  for (auto it = s.begin(); it != s.end(); ++it) has_assertion |= is_assertion(it.key());
  const int n_combinators = has_ref + has_all + has_any + has_one;
  if (n_combinators == 1 && !has_assertion && !has_all) {
    if (has_ref) {
      const ojson& r = s["$ref"];
      if (!r.is_string()) return errorf("%s.$ref: expected a string, got %s", where.c_str(), type_name(r));
      return reference(r.get<std::string>(), where + ".$ref", depth);
    }
    return options(s[has_any ? "anyOf" : "oneOf"], has_any ? "anyOf" : "oneOf", where, depth);
  }
  if (n_combinators > 0) return conjunction(s, where, depth);

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
    for (const std::string& t : types) {
      if (type_bits(t) == 0) {
        return errorf("%s: expected one of object, array, string, number, integer, boolean, null, "
                      "got \"%s\"", w.c_str(), t.substr(0, 64).c_str());
      }
    }
  }
  auto type_allows = [&](const ojson& v) {
    if (types.empty()) return true;
    for (const std::string& t : types) {
      if ((type_bits(t) & value_bits(v)) != 0) return true;
    }
    return false;
  };

  // enum / const: the instance is one of the listed values, written as compact JSON.
  const bool has_enum = s.contains("enum"), has_const = s.contains("const");
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
    if (has_enum && has_const) {  // both must hold: the const, if the enum lists it
      const ojson& c = s["const"];
      const ojson& e = s["enum"];
      values.clear();
      if (std::find(e.begin(), e.end(), c) != e.end()) values.push_back(&c);
    }
    std::erase_if(values, [&](const ojson* v) { return !type_allows(*v); });
    GEM_ASSIGN_OR_RETURN(values, admitted(s, std::move(values), where, depth));
    if (values.empty()) {
      return errorf("%s: no value satisfies the schema's other keywords (type, bounds, lengths, "
                    "pattern, ...), so no instance is valid", w.c_str());
    }
    Node n;
    n.kind = Kind::kAnyOf;
    for (size_t i = 0; i < values.size(); ++i) {
      GEM_ASSIGN_OR_RETURN(int lit, literal(*values[i], w));
      n.options.push_back(lit);
    }
    if (n.options.size() == 1) return n.options[0];
    return add(std::move(n), where);
  }

  if (types.empty()) {
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") ||
               s.contains("format")) {
      types.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum") || s.contains("multipleOf")) {
      types.push_back("number");
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

// enum/const values that also satisfy the schema's other assertions: each is read by a grammar
// of the schema without its enum/const (the matcher is the validator). Without other
// assertions every value is kept as it is.
Result<std::vector<const ojson*>> Compiler::admitted(const ojson& s, std::vector<const ojson*> values,
                                                     const std::string& where, int depth) {
  ojson rest = s;
  bool other = false;
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (it.key() != "enum" && it.key() != "const" && it.key() != "type" && is_assertion(it.key())) other = true;
  }
  if (!other) return values;
  rest.erase("enum");
  rest.erase("const");
  Compiler sub(root_);
  sub.merged_ = merged_;
  sub.n_patterns_ = n_patterns_;  // the patterns compiled there count here
  GEM_ASSIGN_OR_RETURN(int id, sub.compile(rest, where, depth));
  n_patterns_ = sub.n_patterns_;
  GEM_RETURN_IF_ERROR(sub.finish(id));
  auto grammar = std::make_shared<const JsonGrammar>(std::move(sub.g));
  std::erase_if(values, [&](const ojson* v) {
    JsonMatcher m(grammar);
    return !(m.feed(compact(*v)) && m.accepting());
  });
  return values;
}

Result<int> Compiler::typed(const std::string& type, const ojson& s, const std::string& where,
                            int depth) {
  if (type == "object") return object(s, where, depth);
  if (type == "array") return array(s, where, depth);
  if (type == "string") return string(s, where);
  if (type == "number" || type == "integer") return number(s, type == "integer", where);
  if (type == "boolean") {
    Node n;
    n.kind = Kind::kAnyOf;
    GEM_ASSIGN_OR_RETURN(int t, literal(ojson(true), where));
    GEM_ASSIGN_OR_RETURN(int f, literal(ojson(false), where));
    n.options = {t, f};
    return add(std::move(n), where);
  }
  return literal(ojson(nullptr), where);  // "null" (compile() checked the name)
}

// A string: lengths alone are counted by the matcher; with a pattern or a format the content
// follows an automaton, intersected with the lengths' and each other's.
Result<int> Compiler::string(const ojson& s, const std::string& where) {
  Node n;
  n.kind = Kind::kString;
  GEM_ASSIGN_OR_RETURN(n.min_count, count_keyword(s, "minLength", kMaxSchemaMinimum, where, 0));
  GEM_ASSIGN_OR_RETURN(n.max_count, count_keyword(s, "maxLength", -1, where, -1));
  if (n.max_count > 65535) n.max_count = -1;  // beyond what a reply can hold: no limit
  if (n.max_count >= 0 && n.max_count < n.min_count) {
    return errorf("%s: maxLength %d is below minLength %d, so no string is valid", where.c_str(),
                  n.max_count, n.min_count);
  }
  // Patterns and formats: one each, or lists where allOf merged several.
  const bool merged = merged_.count(&s) != 0;
  std::vector<std::pair<std::string, std::string>> automata;  // (keyword path, text)
  for (const char* key : {"pattern", "format"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    const std::string w = where + "." + key;
    std::vector<const ojson*> items;
    if (it->is_array() && merged) {
      for (const ojson& x : *it) items.push_back(&x);
    } else {
      items.push_back(&*it);
    }
    for (const ojson* x : items) {
      if (!x->is_string()) return errorf("%s: expected a string, got %s", w.c_str(), type_name(*x));
      const std::string text = x->get<std::string>();
      if (std::string(key) == "format" && !ByteDfa::known_format(text)) {
        return errorf("%s: the format \"%s\" is not supported by constrained decoding "
                      "(supported: %s)", w.c_str(), text.substr(0, 64).c_str(), ByteDfa::known_formats());
      }
      automata.push_back({w, std::string(key) == "format" ? "\x01" + text : text});
    }
  }
  if (automata.empty()) return add(std::move(n), where);
  n_patterns_ += static_cast<int>(automata.size());
  if (n_patterns_ > kMaxSchemaPatterns) {
    return errorf("%s: the schema has more than %d patterns and formats; simplify it",
                  automata.back().first.c_str(), kMaxSchemaPatterns);
  }
  std::optional<ByteDfa> dfa;
  for (const auto& [w, text] : automata) {
    Result<ByteDfa> d = text[0] == '\x01' ? ByteDfa::format(text.substr(1)) : ByteDfa::pattern(text);
    if (!d.ok()) return errorf("%s: %s", w.c_str(), d.message().c_str());
    if (!dfa) {
      dfa = std::move(*d);
      continue;
    }
    Result<ByteDfa> both = ByteDfa::intersect(*dfa, *d);
    if (!both.ok()) return errorf("%s: with the other patterns and formats: %s", w.c_str(), both.message().c_str());
    dfa = std::move(*both);
  }
  if (n.min_count > 0 || n.max_count >= 0) {
    Result<ByteDfa> both = ByteDfa::intersect(*dfa, ByteDfa::length(n.min_count, n.max_count));
    if (!both.ok()) {
      return errorf("%s: minLength/maxLength with the pattern or format: %s", where.c_str(), both.message().c_str());
    }
    dfa = std::move(*both);
    n.min_count = 0;
    n.max_count = -1;
  }
  GEM_ASSIGN_OR_RETURN(n.dfa, add_dfa(std::move(*dfa), where));
  return add(std::move(n), where);
}

// A number: without bounds the matcher reads any number (15 digits before and after the point,
// two of exponent); with bounds it follows ByteDfa::number.
Result<int> Compiler::number(const ojson& s, bool integer, const std::string& where) {
  Node n;
  n.kind = Kind::kNumber;
  n.integer = integer;
  ByteDfa::Bound lo, hi;
  auto tighter = [](const ByteDfa::Bound& a, const ByteDfa::Bound& b, bool lower) {
    // Whether b is tighter than a (a higher lower bound, a lower upper bound), by value.
    if (!a.present) return true;
    auto as_double = [](const ByteDfa::Bound& x) {
      return std::stod((x.negative ? "-" : "") + (x.int_digits.empty() ? "0" : x.int_digits) + "." +
                       (x.frac_digits.empty() ? "0" : x.frac_digits));
    };
    const double va = as_double(a), vb = as_double(b);
    if (va == vb) return b.exclusive && !a.exclusive;
    return lower ? vb > va : vb < va;
  };
  for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    const std::string w = where + "." + key;
    std::vector<const ojson*> items;
    if (it->is_array() && merged_.count(&s) != 0) {
      for (const ojson& x : *it) items.push_back(&x);
    } else {
      items.push_back(&*it);
    }
    for (const ojson* x : items) {
      if (!x->is_number()) return errorf("%s: expected a number, got %s", w.c_str(), type_name(*x));
      const std::string k = key;
      const bool lower = k == "minimum" || k == "exclusiveMinimum";
      const ByteDfa::Bound b = bound_of(*x, k.rfind("exclusive", 0) == 0);
      ByteDfa::Bound& cur = lower ? lo : hi;
      if (tighter(cur, b, lower)) cur = b;
    }
  }
  // multipleOf: integer multiples only (a fraction such as 0.01 is not exact in a validator's
  // f64 arithmetic); several (allOf) combine into their least common multiple.
  int64_t multiple = 1;
  if (auto it = s.find("multipleOf"); it != s.end()) {
    const std::string w = where + ".multipleOf";
    std::vector<const ojson*> items;
    if (it->is_array() && merged_.count(&s) != 0) {
      for (const ojson& x : *it) items.push_back(&x);
    } else {
      items.push_back(&*it);
    }
    for (const ojson* x : items) {
      if (!x->is_number()) return errorf("%s: expected a number, got %s", w.c_str(), type_name(*x));
      const double v = x->get<double>();
      if (!(v > 0)) return errorf("%s: expected a number above 0, got %s", w.c_str(), compact(*x).c_str());
      if (v != std::floor(v) || v > ByteDfa::kMaxMultiple) {
        return errorf("%s: only integers from 1 to %d are supported by constrained decoding, got %s",
                      w.c_str(), ByteDfa::kMaxMultiple, compact(*x).substr(0, 32).c_str());
      }
      multiple = std::lcm(multiple, static_cast<int64_t>(v));
      if (multiple > ByteDfa::kMaxMultiple) {
        return errorf("%s: the multiples combine to %lld, above the %d supported", w.c_str(),
                      static_cast<long long>(multiple), ByteDfa::kMaxMultiple);
      }
    }
  }
  if (!lo.present && !hi.present && multiple == 1) return add(std::move(n), where);
  n.integer = n.integer || multiple > 1;
  Result<ByteDfa> d = ByteDfa::number(n.integer, lo, hi, static_cast<int>(multiple));
  if (!d.ok()) {
    return errorf("%s: no %s of at most %d digits (no exponent) lies within "
                  "minimum/maximum/multipleOf: %s",
                  where.c_str(), n.integer ? "integer" : "number", ByteDfa::kMaxBoundedDigits,
                  d.message().c_str());
  }
  GEM_ASSIGN_OR_RETURN(n.dfa, add_dfa(std::move(*d), where));
  return add(std::move(n), where);
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

Result<const ojson*> Compiler::resolve(const ojson& ref, const std::string& where) {
  if (!ref.is_string()) return errorf("%s: expected a string, got %s", where.c_str(), type_name(ref));
  const std::string r = ref.get<std::string>();
  if (r != "#" && r.rfind("#/", 0) != 0) {
    return errorf("%s: expected a reference inside this schema such as \"#/$defs/Name\", got \"%s\"",
                  where.c_str(), r.substr(0, 100).c_str());
  }
  const ojson* target = nullptr;
  try {
    const ojson::json_pointer ptr(r.substr(1));
    if (root_.contains(ptr)) target = &root_.at(ptr);
  } catch (const std::exception&) {
    target = nullptr;
  }
  if (target == nullptr) {
    return errorf("%s: \"%s\" names nothing in the schema", where.c_str(), r.substr(0, 100).c_str());
  }
  return target;
}

// A $ref is one node, made before its target is compiled, so a schema may refer to itself
// (trees, linked lists): the graph is finite, and the output's nesting is bounded by
// kMaxJsonNesting (a recursive value deeper than that is never started).
Result<int> Compiler::reference(const std::string& ref, const std::string& where, int depth) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  GEM_ASSIGN_OR_RETURN(const ojson* target, resolve(ojson(ref), where));
  Node placeholder;
  placeholder.kind = Kind::kAnyOf;
  GEM_ASSIGN_OR_RETURN(int id, add(placeholder, where));
  refs_[ref] = id;
  GEM_ASSIGN_OR_RETURN(int t, compile(*target, where + "(" + ref.substr(0, 100) + ")", depth + 1));
  g.nodes[static_cast<size_t>(id)].options = {t};
  return id;
}

// anyOf, or oneOf when its options provably exclude each other.
Result<int> Compiler::options(const ojson& list, const char* key, const std::string& where,
                              int depth) {
  const std::string w = where + "." + key;
  if (!list.is_array() || list.empty()) {
    return errorf("%s: expected a non-empty array of schemas, got %s", w.c_str(),
                  list.is_array() ? "an empty array" : type_name(list));
  }
  if (list.size() > static_cast<size_t>(kMaxSchemaChoices)) {
    return errorf("%s: expected at most %d options, got %zu", w.c_str(), kMaxSchemaChoices, list.size());
  }
  Node n;
  n.kind = Kind::kAnyOf;
  std::vector<const ojson*> raws;
  for (size_t i = 0; i < list.size(); ++i) {
    GEM_ASSIGN_OR_RETURN(int o, compile(list[i], w + "[" + std::to_string(i) + "]", depth + 1));
    n.options.push_back(o);
    raws.push_back(&list[i]);
  }
  if (std::string(key) == "oneOf") GEM_RETURN_IF_ERROR(check_exclusive(n.options, raws, w));
  return add(std::move(n), where);
}

// Whether no output of `node` validates against `schema` (true only when it can be shown:
// different types, a const/enum that excludes the values, a property one requires and the other
// never writes, or a required property whose values exclude each other).
bool Compiler::rejects(int node, const ojson& schema, int depth) {
  if (depth > 8) return false;
  if (schema.is_boolean()) return !schema.get<bool>();
  if (!schema.is_object()) return false;
  const Node& n = g.nodes[static_cast<size_t>(node)];
  if (n.kind == Kind::kAnyOf) {
    if (n.options.empty()) return false;  // a $ref being compiled
    return std::all_of(n.options.begin(), n.options.end(), [&](int o) { return rejects(o, schema, depth + 1); });
  }
  if (auto it = schema.find("$ref"); it != schema.end()) {
    Result<const ojson*> t = resolve(*it, "schema");
    if (t.ok() && rejects(node, **t, depth + 1)) return true;
  }
  if (auto it = schema.find("allOf"); it != schema.end() && it->is_array()) {
    for (const ojson& p : *it) {
      if (rejects(node, p, depth + 1)) return true;
    }
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto it = schema.find(key);
    if (it == schema.end() || !it->is_array()) continue;
    if (std::all_of(it->begin(), it->end(), [&](const ojson& p) { return rejects(node, p, depth + 1); })) {
      return true;
    }
  }
  // Types: what the node writes against what the schema allows.
  uint8_t writes = 0;
  ojson literal_value;
  switch (n.kind) {
    case Kind::kObject: writes = kTObject; break;
    case Kind::kArray: writes = kTArray; break;
    case Kind::kString: writes = kTString; break;
    case Kind::kNumber: writes = n.integer ? kTInt : (kTInt | kTFrac); break;
    case Kind::kLiteral:
      literal_value = ojson::parse(n.literal);
      writes = value_bits(literal_value);
      break;
    case Kind::kAnyOf: break;
  }
  uint8_t allows = kTAll;
  if (auto it = schema.find("type"); it != schema.end()) {
    allows = 0;
    if (it->is_string()) allows = type_bits(it->get<std::string>());
    if (it->is_array()) {
      for (const ojson& t : *it) {
        if (t.is_string()) allows |= type_bits(t.get<std::string>());
      }
    }
  }
  std::vector<const ojson*> listed;
  if (auto it = schema.find("const"); it != schema.end()) listed.push_back(&*it);
  if (auto it = schema.find("enum"); it != schema.end() && it->is_array() && !schema.contains("const")) {
    for (const ojson& v : *it) listed.push_back(&v);
  }
  if (schema.contains("const") || schema.contains("enum")) {
    uint8_t bits = 0;
    for (const ojson* v : listed) bits |= value_bits(*v);
    allows &= bits;
  }
  if ((writes & allows) == 0) return true;
  if (n.kind == Kind::kLiteral && (schema.contains("const") || schema.contains("enum"))) {
    return std::none_of(listed.begin(), listed.end(), [&](const ojson* v) { return *v == literal_value; });
  }
  if (n.kind == Kind::kObject) {
    auto declared = [&](const std::string& key) -> const jsg::Property* {
      const std::string lit = compact(ojson(key));
      for (const jsg::Property& p : n.props) {
        if (g.nodes[static_cast<size_t>(p.key)].literal == lit) return &p;
      }
      return nullptr;
    };
    // A key the schema requires that the node never writes.
    if (auto it = schema.find("required"); it != schema.end() && it->is_array() && n.extra < 0) {
      for (const ojson& k : *it) {
        if (k.is_string() && declared(k.get<std::string>()) == nullptr) return true;
      }
    }
    // A key the node always writes whose values the schema's property rejects, or which the
    // schema forbids.
    const ojson* props = schema.contains("properties") ? &schema["properties"] : nullptr;
    const bool closed = schema.contains("additionalProperties") &&
                        schema["additionalProperties"].is_boolean() &&
                        !schema["additionalProperties"].get<bool>();
    for (const jsg::Property& p : n.props) {
      if (!p.required) continue;
      const ojson name = ojson::parse(g.nodes[static_cast<size_t>(p.key)].literal);
      const std::string key = name.get<std::string>();
      if (props != nullptr && props->is_object() && props->contains(key)) {
        if (rejects(p.value, (*props)[key], depth + 1)) return true;
      } else if (closed) {
        return true;
      }
    }
  }
  return false;
}

Status Compiler::check_exclusive(const std::vector<int>& opts, const std::vector<const ojson*>& raws,
                                 const std::string& where) {
  for (size_t i = 0; i < opts.size(); ++i) {
    for (size_t j = 0; j < opts.size(); ++j) {
      if (i == j || rejects(opts[i], *raws[j], 0)) continue;
      return errorf("%s: options %zu and %zu may both match one value, and constrained decoding "
                    "writes only values that match exactly one (options must differ in type, "
                    "const/enum, or a required property the other lacks or restricts to other "
                    "values); use anyOf if a value may match both",
                    where.c_str(), i, j);
    }
  }
  return ok_status();
}

// allOf (and a combinator beside other keywords, which JSON Schema reads the same way): the
// parts are flattened, the plain ones merged keyword by keyword; an anyOf/oneOf among them is
// distributed, each option joined with the rest (A ∧ (B ∨ C) = (A ∧ B) ∨ (A ∧ C), and the same
// for oneOf, whose options stay exclusive).
Status Compiler::flatten(const ojson& s, const std::string& where, int depth,
                         std::vector<std::pair<const ojson*, std::string>>& plain,
                         std::vector<std::pair<const ojson*, std::string>>& choices) {
  if (depth > kMaxSchemaDepth) {
    return errorf("%s: allOf/$ref nested more than %d deep (a recursive $ref merged with other "
                  "keywords is not supported)", where.c_str(), kMaxSchemaDepth);
  }
  if (s.is_boolean()) {
    if (s.get<bool>()) return ok_status();
    return errorf("%s: the schema false accepts no value", where.c_str());
  }
  if (!s.is_object()) return errorf("%s: expected a schema object, got %s", where.c_str(), type_name(s));
  for (const char* k : kUnsupported) {
    if (s.contains(k)) {
      return errorf("%s.%s: the keyword \"%s\" is not supported by constrained decoding "
                    "(supported: %s)", where.c_str(), k, k, kSupportedList);
    }
  }
  ojson rest = ojson::object();
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (k == "allOf" || k == "anyOf" || k == "oneOf" || k == "$ref" || is_annotation(k)) continue;
    rest[k] = it.value();
  }
  if (!rest.empty()) plain.push_back({&own(std::move(rest), merged_.count(&s) != 0), where});
  if (auto it = s.find("$ref"); it != s.end()) {
    GEM_ASSIGN_OR_RETURN(const ojson* target, resolve(*it, where + ".$ref"));
    GEM_RETURN_IF_ERROR(flatten(*target, where + ".$ref(" + it->get<std::string>().substr(0, 100) + ")",
                                depth + 1, plain, choices));
  }
  if (auto it = s.find("allOf"); it != s.end()) {
    const std::string w = where + ".allOf";
    if (!it->is_array() || it->empty()) {
      return errorf("%s: expected a non-empty array of schemas, got %s", w.c_str(),
                    it->is_array() ? "an empty array" : type_name(*it));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      GEM_RETURN_IF_ERROR(flatten((*it)[i], w + "[" + std::to_string(i) + "]", depth + 1, plain, choices));
    }
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (auto it = s.find(key); it != s.end()) {
      ojson c = ojson::object();
      c[key] = *it;
      choices.push_back({&own(std::move(c), false), where});
    }
  }
  return ok_status();
}

Result<ojson> Compiler::merge(const std::vector<std::pair<const ojson*, std::string>>& parts,
                              const std::string& where) {
  ojson m = ojson::object();
  const std::string w = where + ".allOf";
  std::vector<std::pair<const ojson*, std::string>> closers;  // parts with additionalProperties
  uint8_t types = kTAll;
  bool typed = false;
  auto all_of = [](const ojson& a, const ojson& b) {
    ojson x = ojson::object();
    x["allOf"] = ojson::array({a, b});
    return x;
  };
  for (const auto& [p, pw] : parts) {
    const bool merged = merged_.count(p) != 0;
    for (auto it = p->begin(); it != p->end(); ++it) {
      const std::string& k = it.key();
      const ojson& v = it.value();
      if (k == "type") {
        uint8_t bits = 0;
        if (v.is_string()) bits = type_bits(v.get<std::string>());
        if (v.is_array()) {
          for (const ojson& t : v) {
            if (t.is_string()) bits |= type_bits(t.get<std::string>());
          }
        }
        if (bits == 0) return errorf("%s.type: expected type names (object, array, string, number, integer, boolean, null)", pw.c_str());
        types &= bits;
        typed = true;
      } else if (k == "properties" || k == "items") {
        if (!v.is_object() && !(k == "items" && v.is_boolean())) {
          return errorf("%s.%s: expected %s, got %s", pw.c_str(), k.c_str(),
                        k == "items" ? "a schema" : "an object of schemas", type_name(v));
        }
        if (k == "items") {
          m["items"] = m.contains("items") ? all_of(m["items"], v) : v;
          continue;
        }
        if (!m.contains("properties")) m["properties"] = ojson::object();
        for (auto q = v.begin(); q != v.end(); ++q) {
          ojson& slot = m["properties"][q.key()];
          slot = slot.is_null() ? q.value() : all_of(slot, q.value());
        }
      } else if (k == "required") {
        if (!v.is_array()) return errorf("%s.required: expected an array of property names, got %s", pw.c_str(), type_name(v));
        if (!m.contains("required")) m["required"] = ojson::array();
        for (const ojson& r : v) {
          if (std::find(m["required"].begin(), m["required"].end(), r) == m["required"].end()) m["required"].push_back(r);
        }
      } else if (k == "additionalProperties") {
        closers.push_back({p, pw});
      } else if (k == "minItems" || k == "minLength" || k == "maxItems" || k == "maxLength") {
        if (!v.is_number_integer()) return errorf("%s.%s: expected a non-negative integer, got %s", pw.c_str(), k.c_str(), type_name(v));
        const bool lower = k.rfind("min", 0) == 0;
        if (!m.contains(k) || (lower ? v > m[k] : v < m[k])) m[k] = v;
      } else if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum" ||
                 k == "multipleOf" || k == "pattern" || k == "format") {
        // Kept as lists: number() takes the tightest bounds, string() intersects the automata.
        if (!m.contains(k)) m[k] = ojson::array();
        if (v.is_array() && merged) {
          for (const ojson& x : v) m[k].push_back(x);
        } else {
          m[k].push_back(v);
        }
      } else if (k == "enum" || k == "const") {
        ojson values = k == "const" ? ojson::array({v}) : v;
        if (!values.is_array()) return errorf("%s.enum: expected an array of values, got %s", pw.c_str(), type_name(v));
        if (!m.contains("enum")) {
          m["enum"] = values;
        } else {
          ojson both = ojson::array();
          for (const ojson& x : m["enum"]) {
            if (std::find(values.begin(), values.end(), x) != values.end()) both.push_back(x);
          }
          if (both.empty()) return errorf("%s: the parts' enum/const values exclude each other, so no instance is valid", w.c_str());
          m["enum"] = both;
        }
      }  // other keywords: annotations and unknown ones, which constrain nothing
    }
  }
  if (typed) {
    if (types == 0) return errorf("%s: the parts' types exclude each other, so no instance is valid", w.c_str());
    ojson list = ojson::array();
    for (const char* t : {"object", "array", "string", "integer", "boolean", "null"}) {
      if ((types & type_bits(t)) == type_bits(t)) list.push_back(t);
    }
    if ((types & kTFrac) != 0) {
      for (ojson& t : list) {
        if (t == "integer") t = "number";
      }
    }
    m["type"] = list;
  }
  // additionalProperties: each part's applies to the keys outside that part's properties.
  ojson extras = ojson::array();
  for (const auto& [p, pw] : closers) {
    const ojson& ap = (*p)["additionalProperties"];
    if (!ap.is_boolean() && !ap.is_object()) {
      return errorf("%s.additionalProperties: expected a boolean or a schema, got %s", pw.c_str(), type_name(ap));
    }
    const ojson own_props = p->contains("properties") ? (*p)["properties"] : ojson::object();
    if (m.contains("properties")) {
      ojson kept = ojson::object();
      for (auto q = m["properties"].begin(); q != m["properties"].end(); ++q) {
        if (own_props.contains(q.key()) || (ap.is_boolean() && ap.get<bool>())) {
          kept[q.key()] = q.value();
        } else if (ap.is_object()) {
          kept[q.key()] = all_of(q.value(), ap);
        } else {
          const bool required = m.contains("required") &&
                                std::find(m["required"].begin(), m["required"].end(), q.key()) != m["required"].end();
          if (required) {
            return errorf("%s: \"%s\" is required, but %s.additionalProperties is false and does "
                          "not list it, so no object is valid", w.c_str(), q.key().substr(0, 64).c_str(), pw.c_str());
          }
        }
      }
      m["properties"] = kept;
    }
    extras.push_back(ap);
  }
  if (extras.size() == 1) m["additionalProperties"] = extras[0];
  if (extras.size() > 1) {
    bool closed = false;
    for (const ojson& e : extras) closed |= e.is_boolean() && !e.get<bool>();
    if (closed) {
      m["additionalProperties"] = false;
    } else {
      ojson x = ojson::object();
      x["allOf"] = extras;
      m["additionalProperties"] = x;
    }
  }
  return m;
}

Result<int> Compiler::conjunction(const ojson& s, const std::string& where, int depth) {
  std::vector<std::pair<const ojson*, std::string>> plain, choices;
  GEM_RETURN_IF_ERROR(flatten(s, where, depth, plain, choices));
  if (choices.empty()) {
    if (plain.empty()) return any(where);
    if (plain.size() == 1) return compile(*plain[0].first, where, depth + 1);
    GEM_ASSIGN_OR_RETURN(ojson m, merge(plain, where));
    return compile(own(std::move(m), true), where, depth + 1);
  }
  // The first choice distributed over the rest: option i = allOf[plain..., option i, the other
  // choices...].
  const ojson& first = *choices[0].first;
  const bool one = first.contains("oneOf");
  const char* key = one ? "oneOf" : "anyOf";
  const ojson& list = first[key];
  const std::string w = choices[0].second + "." + key;
  if (!list.is_array() || list.empty()) {
    return errorf("%s: expected a non-empty array of schemas, got %s", w.c_str(),
                  list.is_array() ? "an empty array" : type_name(list));
  }
  if (list.size() > static_cast<size_t>(kMaxSchemaChoices)) {
    return errorf("%s: expected at most %d options, got %zu", w.c_str(), kMaxSchemaChoices, list.size());
  }
  Node n;
  n.kind = Kind::kAnyOf;
  std::vector<const ojson*> raws;
  for (size_t i = 0; i < list.size(); ++i) {
    ojson parts = ojson::array();
    for (const auto& [p, pw] : plain) parts.push_back(*p);
    parts.push_back(list[i]);
    for (size_t c = 1; c < choices.size(); ++c) parts.push_back(*choices[c].first);
    ojson option = ojson::object();
    option["allOf"] = std::move(parts);
    const ojson& o = own(std::move(option), false);
    // Plain parts that are merges keep their lists: mark their copies too.
    for (size_t k = 0; k < plain.size(); ++k) {
      if (merged_.count(plain[k].first) != 0) merged_.insert(&o["allOf"][k]);
    }
    GEM_ASSIGN_OR_RETURN(int id, compile(o, w + "[" + std::to_string(i) + "]", depth + 1));
    n.options.push_back(id);
    raws.push_back(&o);
  }
  if (one) GEM_RETURN_IF_ERROR(check_exclusive(n.options, raws, w));
  return add(std::move(n), where);
}

// The shortest instance of every node, as a fixpoint (a recursive $ref makes the graph cyclic):
// lengths first, improved until stable, with the option each anyOf takes; then the texts along
// those choices, and the frames each needs. A node with no finite instance is not viable.
Status Compiler::finish(int root) {
  g.root = root;
  Node key;
  key.kind = Kind::kString;
  GEM_ASSIGN_OR_RETURN(g.key_string, add(key, "schema"));
  const size_t n = g.nodes.size();
  // anyOf nodes that lead to each other without a value between them (a $ref to itself).
  std::vector<uint8_t> mark(n, 0);
  std::function<bool(int)> cycle = [&](int id) {
    const Node& x = g.nodes[static_cast<size_t>(id)];
    if (x.kind != Kind::kAnyOf || mark[static_cast<size_t>(id)] == 2) return false;
    if (mark[static_cast<size_t>(id)] == 1) return true;
    mark[static_cast<size_t>(id)] = 1;
    for (int o : x.options) {
      if (cycle(o)) return true;
    }
    mark[static_cast<size_t>(id)] = 2;
    return false;
  };
  for (size_t i = 0; i < n; ++i) {
    if (cycle(static_cast<int>(i))) return Status::error("a $ref cycle with no value between its steps");
  }
  constexpr int64_t kInf = INT64_MAX / 4;
  std::vector<int64_t> len(n, kInf);
  std::vector<int> choice(n, -1);
  auto at = [&](int id) { return len[static_cast<size_t>(id)]; };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      const Node& x = g.nodes[i];
      int64_t l = kInf;
      int pick = -1;
      switch (x.kind) {
        case Kind::kLiteral: l = static_cast<int64_t>(x.literal.size()); break;
        case Kind::kNumber: l = x.dfa >= 0 ? g.dfas[static_cast<size_t>(x.dfa)].completion_size(ByteDfa::kStart) : 1; break;
        case Kind::kString:
          l = 2 + (x.dfa >= 0 ? g.dfas[static_cast<size_t>(x.dfa)].completion_size(ByteDfa::kStart) : x.min_count);
          break;
        case Kind::kArray:
          if (x.min_count == 0) {
            l = 2;
          } else if (at(x.items) < kInf) {
            l = 1 + x.min_count * (at(x.items) + 1);
          }
          break;
        case Kind::kObject: {
          l = 1;
          for (const jsg::Property& p : x.props) {
            if (!p.required) continue;
            if (at(p.value) >= kInf) {
              l = kInf;
              break;
            }
            l += at(p.key) + 1 + at(p.value) + 1;
          }
          if (l < kInf) l = std::max<int64_t>(l, 2);
          break;
        }
        case Kind::kAnyOf:
          for (int o : x.options) {
            if (at(o) < l) {
              l = at(o);
              pick = o;
            }
          }
          break;
      }
      l = std::min(l, kInf);
      if (l < len[i]) {
        len[i] = l;
        choice[i] = pick;
        changed = true;
      }
    }
  }
  // Texts and frames along the choices (memoised; a choice never leads back to a node in
  // progress, but guard anyway).
  std::vector<uint8_t> state(n, 0);
  std::function<Status(int)> build = [&](int id) -> Status {
    Node& x = g.nodes[static_cast<size_t>(id)];
    if (state[static_cast<size_t>(id)] == 2) return ok_status();
    if (state[static_cast<size_t>(id)] == 1) return Status::error("internal: shortest instance cycle");
    state[static_cast<size_t>(id)] = 1;
    std::string out;
    int frames = x.kind == Kind::kObject || x.kind == Kind::kArray ? 1 : 0;
    switch (x.kind) {
      case Kind::kLiteral: out = x.literal; break;
      case Kind::kNumber: out = x.dfa >= 0 ? g.dfas[static_cast<size_t>(x.dfa)].completion(ByteDfa::kStart) : "0"; break;
      case Kind::kString:
        out = "\"" + (x.dfa >= 0 ? g.dfas[static_cast<size_t>(x.dfa)].completion(ByteDfa::kStart)
                                 : std::string(static_cast<size_t>(x.min_count), 'a')) + "\"";
        break;
      case Kind::kArray:
        out = "[";
        if (x.min_count > 0) {
          GEM_RETURN_IF_ERROR(build(x.items));
          const Node& item = g.nodes[static_cast<size_t>(x.items)];
          for (int i = 0; i < x.min_count; ++i) out += (i > 0 ? "," : "") + item.min_text;
          frames = 1 + item.frames;
        }
        out += "]";
        break;
      case Kind::kObject: {
        out = "{";
        bool first = true;
        for (const jsg::Property& p : x.props) {
          if (!p.required) continue;
          GEM_RETURN_IF_ERROR(build(p.key));
          GEM_RETURN_IF_ERROR(build(p.value));
          if (!first) out += ',';
          first = false;
          const Node& v = g.nodes[static_cast<size_t>(p.value)];
          out += g.nodes[static_cast<size_t>(p.key)].literal + ":" + v.min_text;
          frames = std::max(frames, 1 + v.frames);
        }
        out += '}';
        break;
      }
      case Kind::kAnyOf: {
        const int c = choice[static_cast<size_t>(id)];
        GEM_RETURN_IF_ERROR(build(c));
        out = g.nodes[static_cast<size_t>(c)].min_text;
        frames = g.nodes[static_cast<size_t>(c)].frames;
        break;
      }
    }
    Node& y = g.nodes[static_cast<size_t>(id)];
    y.min_text = std::move(out);
    y.frames = frames;
    y.viable = true;
    state[static_cast<size_t>(id)] = 2;
    return ok_status();
  };
  int64_t longest = 0;
  for (size_t i = 0; i < n; ++i) {
    if (len[i] >= kInf) continue;
    if (len[i] > static_cast<int64_t>(jsg::kMaxMinText)) {
      if (static_cast<int>(i) == root) break;
      continue;  // too long to ever write: not viable
    }
    GEM_RETURN_IF_ERROR(build(static_cast<int>(i)));
    longest = std::max(longest, len[i]);
  }
  const Node& r = g.nodes[static_cast<size_t>(root)];
  if (len[static_cast<size_t>(root)] >= kInf) return Status::error("no finite instance exists");
  if (!r.viable) {
    return errorf("the schema's smallest valid instance is longer than %zu bytes", jsg::kMaxMinText);
  }
  if (r.frames > kMaxJsonNesting) {
    return errorf("the schema's smallest valid instance nests deeper than %d", kMaxJsonNesting);
  }
  // One byte opens at most one value (its shortest instance, beside a key of at most `longest`
  // bytes) or starts one more required member or item; a few bytes of punctuation around; an
  // automaton step may lengthen its completion by up to its longest one.
  int32_t dfa_growth = 0;
  for (const ByteDfa& d : g.dfas) dfa_growth = std::max(dfa_growth, d.max_completion_size());
  g.max_growth = 2 * static_cast<size_t>(longest) + 8 + static_cast<size_t>(dfa_growth) + 2;
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
    if (!n.viable) return;
    if (n.kind == Kind::kAnyOf) {
      for (int o : n.options) push(t, o, out);
      return;
    }
    if (!fits(t.depth, node)) return;
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
  // A JSON escape letter and the byte it stands for; the state after it (-1: none).
  static int32_t escaped_step(const ByteDfa& d, int32_t state, uint8_t letter) {
    static constexpr std::pair<char, char> kEscapes[] = {
        {'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', '\b'}, {'f', '\f'}, {'n', '\n'}, {'r', '\r'}, {'t', '\t'}};
    for (const auto& [e, byte] : kEscapes) {
      if (e == static_cast<char>(letter)) return d.step(state, static_cast<uint8_t>(byte));
    }
    return -1;
  }
  // The escape letter after '\\' with the shortest completion (0: none can follow).
  static char best_escape(const ByteDfa& d, int32_t state) {
    char best = 0;
    int32_t cost = 0;
    for (char e : {'n', 't', 'r', 'b', 'f', '/', '"', '\\'}) {
      const int32_t next = escaped_step(d, state, static_cast<uint8_t>(e));
      if (next >= 0 && (best == 0 || d.completion_size(next) < cost)) {
        best = e;
        cost = d.completion_size(next);
      }
    }
    return best;
  }

  // Whether `node` can start inside `depth` open containers with room for its shortest instance
  // within kMaxJsonNesting (so every reading the matcher keeps can still be completed). A value
  // is pushed only onto containers (a key's frame is gone by then), so depth = t.depth.
  bool fits(int depth, int node) const {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    if (!n.viable) return false;
    if (n.kind == Kind::kAnyOf) {
      return std::any_of(n.options.begin(), n.options.end(), [&](int o) { return fits(depth, o); });
    }
    return depth + n.frames <= kMaxJsonNesting;
  }
  // The property a comma at `pos` leads to in the shortest completion: the next required one,
  // else the first optional one whose value fits; -1 for none (-2: an undeclared key).
  int next_key(const Node& n, int pos, int depth) const {
    if (n.extra >= 0) return fits(depth, n.extra) ? -2 : -1;
    for (size_t j = static_cast<size_t>(pos); j < n.props.size(); ++j) {
      if (n.props[j].required) return static_cast<int>(j);
    }
    for (size_t j = static_cast<size_t>(pos); j < n.props.size(); ++j) {
      if (fits(depth, n.props[j].value)) return static_cast<int>(j);
    }
    return -1;
  }

  // After the opening quote of a key: one reading per candidate property (the next declared
  // ones up to and including the first required one), or a free key string.
  void start_key(const JsonThread& t, Threads& out) const {
    const JsonFrame& f = t.frames[t.depth - 1];
    const Node& n = g_.nodes[static_cast<size_t>(f.node)];
    if (t.depth >= JsonThread::kMaxFrames) return;
    if (n.extra >= 0) {
      if (!fits(t.depth, n.extra)) return;
      JsonThread k = t;
      k.frames[k.depth - 1].phase = kObjKey;
      k.frames[k.depth - 1].aux = -1;
      k.frames[k.depth++] = JsonFrame{g_.key_string, kStrBody, 0, 0, 0, 0};
      out.push_back(k);
      return;
    }
    for (size_t j = static_cast<size_t>(f.pos); j < n.props.size(); ++j) {
      if (!n.props[j].required && !fits(t.depth, n.props[j].value)) continue;
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
              if (c != '{') return;
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
              if (c == ',' && next_key(n, f.pos, t.depth) != -1) {
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
              if (c != '[') return;
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
              if (c == ',' && (n.max_count < 0 || f.count < n.max_count) && fits(t.depth, n.items)) {
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
          // With an automaton, the decoded content steps it (state in f.pos): raw bytes as
          // they are, an escape as the byte it stands for; no \u escapes.
          const ByteDfa* dfa = n.dfa >= 0 ? &g_.dfas[static_cast<size_t>(n.dfa)] : nullptr;
          switch (f.phase) {
            case kStart:
              if (is_ws(c)) return whitespace();
              if (c != '"') return;
              f.phase = kStrBody;
              f.count = 0;
              f.pos = ByteDfa::kStart;
              return consumed();
            case kStrBody:
              if (c == '"') {
                if (f.count < n.min_count) return;
                if (dfa != nullptr && !dfa->accepting(f.pos)) return;
                return done();
              }
              if (c < 0x20 || at_max) return;
              if (dfa != nullptr) {
                if (c == '\\') {
                  if (best_escape(*dfa, f.pos) == 0) return;
                } else {
                  const int32_t next = dfa->step(f.pos, c);
                  if (next < 0) return;
                  f.pos = next;
                }
              }
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
              if (dfa != nullptr) {
                const int32_t next = escaped_step(*dfa, f.pos, c);
                if (next < 0) return;
                f.pos = next;
                f.phase = kStrBody;
                return consumed();
              }
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
              if (dfa != nullptr) {
                const int32_t next = dfa->step(f.pos, c);
                if (next < 0) return;
                f.pos = next;
              }
              f.aux = 0;
              if (--f.sub == 0) f.phase = kStrBody;
              return consumed();
            }
            default:
              return;
          }
        }
        case Kind::kNumber: {
          if (n.dfa >= 0) {
            // Bounded: the automaton reads the number; it ends before a byte it cannot take.
            const ByteDfa& d = g_.dfas[static_cast<size_t>(n.dfa)];
            if (f.phase == kStart) {
              if (is_ws(c)) return whitespace();
              const int32_t next = d.step(ByteDfa::kStart, c);
              if (next < 0) return;
              f.phase = kNumDfa;
              f.pos = next;
              return consumed();
            }
            const int32_t next = d.step(f.pos, c);
            if (next >= 0) {
              f.pos = next;
              return consumed();
            }
            if (!d.accepting(f.pos)) return;
            pop(t);
            continue;
          }
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
  // `depth`: the frames on the stack up to and including `f`.
  void finish(const JsonFrame& f, int depth, std::string& out) const {
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
            const int next = next_key(n, f.pos, depth);  // not -1: the comma was read for it
            if (next == -2) {
              out += "\"\":" + min(n.extra) + "}";
              return;
            }
            const size_t j = static_cast<size_t>(next);
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
        if (n.dfa >= 0) {
          const ByteDfa& d = g_.dfas[static_cast<size_t>(n.dfa)];
          int32_t state = f.pos;
          if (f.phase == kStrEscape) {
            const char e = best_escape(d, state);
            out += e;
            state = escaped_step(d, state, static_cast<uint8_t>(e));
          }
          out += d.completion(state);  // mid-character, its first bytes finish the character
          out += '"';
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
        if (n.dfa >= 0) {
          out += f.phase == kStart ? n.min_text : g_.dfas[static_cast<size_t>(n.dfa)].completion(f.pos);
          return;
        }
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
      finish(t.frames[i], i + 1, out);
    }
    return out;
  }

  bool accepting(const JsonThread& t) const {
    if (t.depth == 0) return true;
    if (t.depth > 1) return false;
    const JsonFrame& f = t.frames[0];
    const Node& n = g_.nodes[static_cast<size_t>(f.node)];
    if (n.kind == Kind::kNumber && n.dfa >= 0) {
      return f.phase == kNumDfa && g_.dfas[static_cast<size_t>(n.dfa)].accepting(f.pos);
    }
    return n.kind == Kind::kNumber &&
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

bool JsonMatcher::plain_readings(std::vector<PlainReading>* out) const {
  out->clear();
  if (threads_.empty()) return false;
  for (const JsonThread& t : threads_) {
    if (t.depth == 0) return false;
    const JsonFrame& f = t.frames[t.depth - 1];
    const Node& n = grammar_->nodes[static_cast<size_t>(f.node)];
    if (n.kind != Kind::kString || f.phase != jsg::kStrBody) return false;
    PlainReading r;
    if (n.dfa >= 0) {
      r.dfa = &grammar_->dfas[static_cast<size_t>(n.dfa)];
      r.state = f.pos;
      r.rest = Stepper(*grammar_).completion(t).size() - static_cast<size_t>(r.dfa->completion_size(f.pos));
    } else if (n.max_count >= 0) {
      r.max_chars = std::max(0, n.max_count - static_cast<int>(f.count));
    }
    out->push_back(r);
  }
  return true;
}

}  // namespace gem::chat

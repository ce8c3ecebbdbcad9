// The JSON Schema compiler, the byte-level matcher and the JSON constraint (response_format):
// valid documents are accepted and invalid ones refused byte by byte; a random walk through the
// matcher and the shortest completion always end in a document that parses and validates; the
// constraint over the real Gemma 4 vocabulary, driven by random logits, always yields a valid
// document, also when max_tokens forces the completion early; unsupported keywords are refused by
// name.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "chat/chat_test_util.h"
#include "chat/constraint.h"
#include "chat/json_schema.h"

namespace gem::chat {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

// The formats as RFC 3339 / RFC 4122 / ajv-formats define them (days per month, leap years).
bool format_ok(const std::string& f, const std::string& v) {
  auto date = [](const std::string& d) {
    std::smatch m;
    if (!std::regex_match(d, m, std::regex(R"((\d{4})-(\d\d)-(\d\d))"))) return false;
    const int y = std::stoi(m[1]), mo = std::stoi(m[2]), day = std::stoi(m[3]);
    const bool leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    const int days[] = {0, 31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return mo >= 1 && mo <= 12 && day >= 1 && day <= days[mo];
  };
  auto time = [](const std::string& t) {
    std::smatch m;
    if (!std::regex_match(t, m, std::regex(R"((\d\d):(\d\d):(\d\d)(\.\d+)?([zZ]|[+-](\d\d):(\d\d)))"))) return false;
    return std::stoi(m[1]) <= 23 && std::stoi(m[2]) <= 59 && std::stoi(m[3]) <= 59 &&
           (!m[6].matched || (std::stoi(m[6]) <= 23 && std::stoi(m[7]) <= 59));
  };
  if (f == "date") return date(v);
  if (f == "time") return time(v);
  if (f == "date-time") {
    const size_t t = v.find_first_of("Tt");
    return t != std::string::npos && date(v.substr(0, t)) && time(v.substr(t + 1));
  }
  if (f == "uuid") return std::regex_match(v, std::regex("[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"));
  if (f == "email") return std::regex_match(v, std::regex(R"([^@\s]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+)"));
  if (f == "ipv4") {
    std::smatch m;
    if (!std::regex_match(v, m, std::regex(R"((\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3}))"))) return false;
    for (int i = 1; i <= 4; ++i) {
      const std::string part = m[i];
      if (std::stoi(part) > 255 || (part.size() > 1 && part[0] == '0')) return false;
    }
    return true;
  }
  return false;
}

// A validator for the supported subset, written independently of the matcher: it reads the
// schema as JSON Schema says (the matcher's output order and spacing do not matter here).
bool validates(const json& v, const json& s, const json& root, std::string* why) {
  auto fail = [&](const std::string& w) {
    *why = w + " at " + v.dump().substr(0, 80);
    return false;
  };
  if (s.is_boolean()) return s.get<bool>() || fail("false schema");
  if (s.contains("$ref")) {  // beside other keywords, all apply
    const std::string ref = s["$ref"];
    if (!validates(v, root.at(json::json_pointer(ref.substr(1))), root, why)) return false;
  }
  if (s.contains("allOf")) {
    for (const json& o : s["allOf"]) {
      if (!validates(v, o, root, why)) return false;
    }
  }
  if (s.contains("anyOf") || s.contains("oneOf")) {
    const bool one = s.contains("oneOf");
    int n = 0;
    for (const json& o : s[one ? "oneOf" : "anyOf"]) {
      std::string w;
      n += validates(v, o, root, &w);
    }
    if (n == 0 || (one && n > 1)) return fail(one ? "not exactly one oneOf option" : "no anyOf option");
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && !(x >= s["minimum"].get<double>())) return fail("minimum");
    if (s.contains("maximum") && !(x <= s["maximum"].get<double>())) return fail("maximum");
    if (s.contains("exclusiveMinimum") && !(x > s["exclusiveMinimum"].get<double>())) return fail("exclusiveMinimum");
    if (s.contains("exclusiveMaximum") && !(x < s["exclusiveMaximum"].get<double>())) return fail("exclusiveMaximum");
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    // ECMAScript search (the test patterns are ASCII, where bytes are characters).
    if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) {
      return fail("pattern");
    }
    if (s.contains("format") && !format_ok(s["format"].get<std::string>(), str)) return fail("format");
  }
  if (s.contains("const") && v != s["const"]) return fail("const");
  if (s.contains("enum")) {
    bool found = false;
    for (const json& e : s["enum"]) found |= e == v;
    if (!found) return fail("enum");
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string()) {
      types.push_back(s["type"]);
    } else {
      for (const json& t : s["type"]) types.push_back(t);
    }
    bool ok = false;
    for (const std::string& t : types) {
      ok |= (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
            (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
            (t == "integer" && (v.is_number_integer() ||
                                (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))) ||
            (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
    }
    if (!ok) return fail("type");
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    for (const json& r : s.value("required", json::array())) {
      if (!v.contains(r.get<std::string>())) return fail("required " + r.get<std::string>());
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (!validates(it.value(), props[it.key()], root, why)) return false;
      } else if (s.contains("additionalProperties")) {
        const json& ap = s["additionalProperties"];
        if (ap.is_boolean() && !ap.get<bool>()) return fail("additional property " + it.key());
        if (ap.is_object() && !validates(it.value(), ap, root, why)) return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return fail("minItems");
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return fail("maxItems");
    if (s.contains("items")) {
      for (const json& e : v) {
        if (!validates(e, s["items"], root, why)) return false;
      }
    }
  }
  if (v.is_string()) {
    // Characters as code points.
    size_t n = 0;
    for (unsigned char c : v.get<std::string>()) n += (c & 0xC0) != 0x80;
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return fail("minLength");
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return fail("maxLength");
  }
  return true;
}

// Parses `text` and validates it; the failure says why.
::testing::AssertionResult valid_instance(const std::string& text, const ojson& ordered) {
  const json schema = json::parse(ordered.dump());
  json v = json::parse(text, nullptr, false);
  if (v.is_discarded()) return ::testing::AssertionFailure() << "does not parse: " << text;
  std::string why;
  if (!validates(v, schema, schema, &why)) {
    return ::testing::AssertionFailure() << "invalid (" << why << "): " << text;
  }
  return ::testing::AssertionSuccess();
}

std::shared_ptr<const JsonGrammar> compile_ok(const ojson& schema) {
  auto g = compile_json_schema(schema, "schema");
  EXPECT_TRUE(g.ok()) << g.message();
  return g.ok() ? *g : nullptr;
}

// Schemas covering every supported keyword (ordered: objects keep their keys' order).
std::vector<ojson> schemas() {
  return {
      ojson::parse(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
                      "email":{"type":"string","maxLength":12},"tags":{"type":"array","items":{"type":"string"},"maxItems":3}},
                      "required":["name","age"],"additionalProperties":false})"),
      ojson::parse(R"({"type":"array","items":{"type":"number"},"minItems":2,"maxItems":4})"),
      ojson::parse(R"({"enum":["red","green",3,null,{"a":[1,2]}]})"),
      ojson::parse(R"({"anyOf":[{"type":"string","minLength":3},{"type":"null"},{"type":"boolean"}]})"),
      ojson::parse(R"({"type":["integer","null"]})"),
      ojson::parse(R"({"const":"fixed \u00e9 value"})"),
      ojson::parse(R"({"type":"object"})"),
      ojson::parse(R"({})"),
      ojson::parse(R"({"$defs":{"point":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"]}},
                      "type":"object","properties":{"from":{"$ref":"#/$defs/point"},"to":{"$ref":"#/$defs/point"},
                      "label":{"anyOf":[{"type":"string"},{"type":"null"}],"title":"Label","default":null}},
                      "required":["from","to","label"]})"),
      ojson::parse(R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"array",
                      "items":{"type":"object","properties":{"c":{"type":"boolean"}},"required":["c"]},"minItems":1}},
                      "required":["b"]}},"required":["a"],"title":"nested","description":"d"})"),
      ojson::parse(R"({"type":"object","additionalProperties":{"type":"integer"}})"),
      ojson::parse(R"({"type":"string","minLength":2,"maxLength":5})"),
      // Bounds, patterns, formats.
      ojson::parse(R"({"type":"object","properties":{"n":{"type":"integer","minimum":-3,"exclusiveMaximum":50},
                      "x":{"type":"number","minimum":0.5,"maximum":9.75},"code":{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"},
                      "day":{"type":"string","format":"date"},"at":{"type":"string","format":"date-time"},
                      "id":{"type":"string","format":"uuid"},"ip":{"type":"string","format":"ipv4"},
                      "mail":{"type":"string","format":"email","maxLength":24}},
                      "required":["n","x","code","day","at","id","ip","mail"]})"),
      ojson::parse(R"({"type":"string","pattern":"a(b|c)+d","maxLength":12})"),
      ojson::parse(R"({"type":"array","items":{"type":"integer","exclusiveMinimum":-1000000,"maximum":-999990},"maxItems":3})"),
      // oneOf, allOf, $ref beside keywords, recursion.
      ojson::parse(R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"v":{"type":"integer"}},"required":["kind","v"]},
                      {"type":"object","properties":{"kind":{"const":"b"},"w":{"type":"string","maxLength":3}},"required":["kind"]},
                      {"type":"null"}]})"),
      ojson::parse(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer","minimum":3}},"required":["a"]},
                      {"properties":{"a":{"maximum":7},"b":{"type":"string","pattern":"^x"}},"required":["b"]}]})"),
      ojson::parse(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},
                      "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v","kids"],
                      "additionalProperties":false}},"$ref":"#/$defs/node"})"),
      ojson::parse(R"({"type":"array","items":{"$ref":"#"}})"),
  };
}

TEST(JsonSchema, AcceptsValidDocuments) {
  const std::vector<std::pair<ojson, std::vector<std::string>>> cases = {
      {schemas()[0], {R"({"name":"Ann","age":31})", R"({ "name" : "B\u00e9\"x" , "age" : -7, "tags" : ["a","b"] })",
                      R"({"name":"","age":0,"email":"abc","tags":[]})", "{\n  \"name\": \"x\",\n  \"age\": 1\n}"}},
      {schemas()[1], {"[1,2]", "[1.5e3, -0.25, 0, 7]"}},
      {schemas()[2], {"\"red\"", "3", "null", "{\"a\":[1,2]}"}},
      {schemas()[3], {"\"abc\"", "null", "true"}},
      {schemas()[4], {"12", "null", "-0"}},
      {schemas()[5], {"\"fixed \xC3\xA9 value\""}},
      {schemas()[6], {"{}", R"({"x":[1,{"y":null}],"z":"w"})"}},
      {schemas()[7], {"1", "\"s\"", "[[],{}]", "false"}},
      {schemas()[11], {"\"ab\"", "\"abcde\"", "\"\xE2\x82\xAC\xE2\x82\xAC\""}},
  };
  for (const auto& [schema, docs] : cases) {
    auto g = compile_ok(schema);
    ASSERT_TRUE(g);
    for (const std::string& d : docs) {
      JsonMatcher m(g);
      EXPECT_TRUE(m.feed(d)) << schema.dump() << " refused " << d;
      EXPECT_TRUE(m.accepting()) << schema.dump() << " incomplete after " << d;
      EXPECT_TRUE(valid_instance(d, schema));
    }
  }
}

TEST(JsonSchema, RefusesInvalidDocuments) {
  const std::vector<std::pair<ojson, std::vector<std::string>>> cases = {
      // a missing required key, an undeclared key, a wrong type, a string over maxLength,
      // too many items, keys out of the schema's order, a trailing comma
      {schemas()[0], {R"({"age":3})", R"({"name":"a","age":1,"x":1})", R"({"name":1})",
                      R"({"name":"a","age":1,"email":"1234567890123"})",
                      R"({"name":"a","age":1,"tags":["a","b","c","d"]})", R"({"age":1,"name":"a"})",
                      R"({"name":"a","age":1,})", R"({"name":"a","age":1.5})"}},
      {schemas()[1], {"[1]", "[1,2,3,4,5]", "[01]", "[1.]", "[1e]", "[--1]"}},
      {schemas()[2], {"\"blue\"", "4", "{\"a\":[1]}"}},
      {schemas()[3], {"\"ab\"", "1"}},
      {schemas()[4], {"1.5", "\"1\""}},
      {schemas()[11], {"\"a\"", "\"abcdef\""}},
      // broken strings: a raw newline, a bad escape, a lone surrogate, invalid UTF-8
      {schemas()[7], {"\"a\nb\"", "\"\\x\"", "\"\\ud800\"", "\"\xC0\xAF\"", "\"\xED\xA0\x80\"", "[1 2]",
                      "1 2", "{\"a\" 1}", "nul"}},
  };
  for (const auto& [schema, docs] : cases) {
    auto g = compile_ok(schema);
    ASSERT_TRUE(g);
    for (const std::string& d : docs) {
      JsonMatcher m(g);
      EXPECT_FALSE(m.feed(d) && m.accepting()) << schema.dump() << " took " << d;
    }
  }
  // Bounded whitespace and numbers.
  auto any = compile_ok(ojson::object());
  JsonMatcher m(any);
  EXPECT_FALSE(m.accepts(std::string(kMaxJsonWhitespace + 1, ' ')));
  EXPECT_TRUE(m.accepts(std::string(kMaxJsonWhitespace, ' ')));
  EXPECT_FALSE(m.accepts("1234567890123456"));
  EXPECT_FALSE(m.accepts("1e100"));
  // Nesting is bounded, and a complete value takes nothing more.
  EXPECT_FALSE(m.accepts(std::string(kMaxJsonNesting + 1, '[')));
  EXPECT_TRUE(m.feed("[]"));
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(m.accepts(" "));
}

TEST(JsonSchema, RandomWalksCompleteToValidDocuments) {
  std::mt19937 rng(1234);
  for (const ojson& schema : schemas()) {
    auto g = compile_ok(schema);
    ASSERT_TRUE(g);
    for (int trial = 0; trial < 200; ++trial) {
      JsonMatcher m(g);
      std::string text;
      const int steps = static_cast<int>(rng() % 60);
      for (int i = 0; i < steps && !m.finished(); ++i) {
        // A random byte the matcher takes (printable ASCII, some UTF-8 and whitespace).
        std::vector<uint8_t> ok;
        for (int c = 0; c < 256; ++c) {
          const char ch = static_cast<char>(c);
          if (m.accepts(std::string_view(&ch, 1))) ok.push_back(static_cast<uint8_t>(c));
        }
        if (ok.empty()) break;
        const char ch = static_cast<char>(ok[rng() % ok.size()]);
        ASSERT_TRUE(m.feed(std::string_view(&ch, 1)));
        text += ch;
      }
      const std::string rest = m.shortest_completion();
      ASSERT_TRUE(m.feed(rest)) << schema.dump() << ": completion " << rest << " refused after " << text;
      EXPECT_TRUE(m.accepting()) << text << rest;
      EXPECT_TRUE(valid_instance(text + rest, schema)) << "schema " << schema.dump();
    }
    // The completion from the start is the shortest instance.
    JsonMatcher fresh(g);
    EXPECT_TRUE(valid_instance(fresh.shortest_completion(), schema));
  }
}

TEST(JsonSchema, UnsupportedKeywordsAndBadSchemasAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"object","patternProperties":{"a":{}}})", "schema.patternProperties: the keyword \"patternProperties\" is not supported"},
      {R"j({"type":"object","properties":{"a":{"type":"string","pattern":"(?=x)"}}})j", "schema.properties.a.pattern: lookahead"},
      {R"({"type":"string","pattern":"a{1001}"})", "schema.pattern: repetition count 1001 over 1000"},
      {R"({"type":"string","pattern":"^([a-z]{1000}){5}$"})", "schema.pattern: the pattern needs an automaton of more than 4096 states"},
      {R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":2}]})", "schema.oneOf: options 0 and 1 may both match"},
      {R"({"type":"string","format":"iri"})", "schema.format: the format \"iri\" is not supported"},
      {R"({"type":"integer","minimum":5,"exclusiveMaximum":5})", "schema: no integer"},
      {R"({"type":"number","maximum":"9"})", "schema.maximum: expected a number, got a string"},
      {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "schema.allOf: the parts' types exclude each other"},
      {R"({"allOf":[{"const":1},{"const":2}]})", "schema.allOf: the parts' enum/const values exclude each other"},
      {R"({"$ref":"#"})", "a $ref cycle"},
      {R"({"type":"strin"})", "schema.type: expected one of object"},
      {R"({"type":"array","items":[{"type":"string"}]})", "tuple validation is not supported"},
      {R"({"enum":[]})", "schema.enum: expected a non-empty array"},
      {R"({"$ref":"#/$defs/missing"})", "names nothing"},
      {R"({"$defs":{"t":{"type":"array","items":{"$ref":"#/$defs/t"},"minItems":1}},"$ref":"#/$defs/t"})", "no finite instance"},
      {R"({"type":"object","required":"a"})", "schema.required: expected an array"},
      {R"({"type":"array","minItems":5,"maxItems":2})", "below minItems"},
      {R"({"type":"array","minItems":100000})", "schema.minItems: expected at most"},
      {R"(false)", "accepts no value"},
      {R"(3)", "schema: expected a schema object, got a number"},
      {R"({"type":"string","enum":[1,2]})", "schema.enum: no value satisfies"},
      {R"({"type":"string","enum":["a","bb"],"minLength":3})", "schema.enum: no value satisfies"},
      {R"({"anyOf":[{"type":"string"}],"type":"integer"})", "schema.anyOf[0].allOf: the parts' types exclude each other"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"],"additionalProperties":false})",
       "schema.required: \"b\" is required but not in properties"},
  };
  for (const auto& [text, want] : cases) {
    auto g = compile_json_schema(ojson::parse(text), "schema");
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_NE(g.message().find(want), std::string::npos) << text << " -> " << g.message();
  }
  // Size bounds: too many nodes, too deep.
  json wide = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 200; ++i) {
    std::string name = "p";
    name += std::to_string(i);
    wide["properties"][name] = {{"enum", json::array({1, 2, 3, 4, 5, 6, 7, 8, 9, 10})}};
  }
  auto g = compile_json_schema(ojson::parse(wide.dump()), "schema");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("nodes"), std::string::npos) << g.message();
  json patterns = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i <= kMaxSchemaPatterns; ++i) {
    std::string name = "p";  // (not "p" + ...: GCC 12's -Wrestrict false positive)
    name += std::to_string(i);
    patterns["properties"][name] = {{"type", "string"}, {"pattern", "^a"}};
  }
  g = compile_json_schema(ojson::parse(patterns.dump()), "schema");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("more than 64 patterns and formats"), std::string::npos) << g.message();
  json deep = {{"type", "string"}};
  for (int i = 0; i < kMaxSchemaDepth + 2; ++i) deep = {{"type", "array"}, {"items", deep}};
  g = compile_json_schema(ojson::parse(deep.dump()), "schema");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("nested at most"), std::string::npos) << g.message();
}

TEST(JsonSchema, KeysFollowTheSchemasOrder) {
  auto g = compile_json_schema(
      ojson::parse(R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"integer"}},"required":["zeta","alpha"]})"),
      "schema");
  ASSERT_TRUE(g.ok());
  JsonMatcher m(*g);
  EXPECT_EQ(m.shortest_completion(), R"({"zeta":0,"alpha":0})");
}

// Drives the constraint like the engine does, with random logits in place of a model.
std::string generate(const Tokenizer& tk, Constraint& c, std::mt19937& rng, int max_tokens,
                     bool* ended) {
  std::vector<float> logits(static_cast<size_t>(tk.n_vocab()));
  std::vector<int32_t> gen;
  std::normal_distribution<float> noise(0.0f, 3.0f);
  *ended = false;
  while (static_cast<int>(gen.size()) < max_tokens) {
    for (float& l : logits) l = noise(rng);
    int32_t t = c(logits, gen);
    if (t < 0) {
      t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      EXPECT_TRUE(std::isfinite(logits[static_cast<size_t>(t)])) << "every token banned";
    }
    gen.push_back(t);
    if (t == tok::kTurnEnd) {
      *ended = true;
      break;
    }
  }
  std::string text, thought;
  bool in_thought = false;
  for (int32_t t : gen) {
    if (t == tok::kChannelStart) {
      in_thought = true;
      continue;
    }
    if (t == tok::kChannelEnd) {
      in_thought = false;
      // The output parser reads a channel as a thought only when it opens with "thought".
      EXPECT_EQ(thought.rfind("thought\n", 0), 0u) << "thought: " << thought;
      continue;
    }
    (in_thought ? thought : text) += tk.piece_view(t, false);
  }
  return text;
}

TEST(JsonConstraint, RandomLogitsAlwaysGiveValidDocuments) {
  REQUIRE_TOKENIZER();
  const auto start = std::chrono::steady_clock::now();
  auto table = std::make_shared<const JsonTokenTable>(tk);
  const double table_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("token table: %.3f s, %zu plain-text tokens\n", table_s, table->plain().size());
  std::mt19937 rng(7);
  int n_steps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const ojson& schema : schemas()) {
    auto g = compile_ok(schema);
    ASSERT_TRUE(g);
    // The fewest tokens an instance needs (its shortest text, then <turn|>): a budget of exactly
    // that forces the completion from the first token.
    std::vector<int32_t> shortest;
    tk.encode_text(JsonMatcher(g).shortest_completion(), shortest);
    const int need = static_cast<int>(shortest.size()) + 1;
    for (int budget : {need, need + 6, need + 60}) {
      for (bool thinking : {false, true}) {
        JsonConstraintOptions o;
        o.budget = budget;
        o.thinking = thinking;
        o.reasoning_budget = 5;
        Constraint c = make_json_constraint(g, table, tk, o);
        bool ended = false;
        const std::string text = generate(tk, c, rng, budget, &ended);
        n_steps += budget;
        EXPECT_TRUE(ended) << schema.dump() << " budget " << budget << ": " << text;
        EXPECT_TRUE(valid_instance(text, schema)) << "budget " << budget << " thinking " << thinking;
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d constrained steps at most, %.1f ms each at most\n", n_steps, 1e3 * secs / n_steps);
}

// anyOf over many objects keeps as many readings open; every step must stay a walk over the
// viable tokens (strings take the plain-text fast path with all readings inside them), not a
// full vocabulary walk per reading, which took seconds per token.
TEST(JsonConstraint, ManyReadingsStayFastAndValid) {
  REQUIRE_TOKENIZER();
  auto table = std::make_shared<const JsonTokenTable>(tk);
  ojson options = ojson::array();
  for (int i = 0; i < 100; ++i) {
    ojson props = ojson::object(), required = ojson::array();
    for (int k = 0; k < 8; ++k) {
      std::string key = "key";
      key += std::to_string(k);
      props[key] = {{"type", k == 7 ? "integer" : "string"}};
      required.push_back(key);
    }
    options.push_back({{"type", "object"}, {"properties", props}, {"required", required}});
  }
  const ojson schema = {{"anyOf", options}};
  auto g = compile_ok(schema);
  ASSERT_TRUE(g);
  JsonConstraintOptions o;
  o.budget = 120;
  Constraint c = make_json_constraint(g, table, tk, o);
  std::mt19937 rng(3);
  bool ended = false;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string text = generate(tk, c, rng, o.budget, &ended);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("100 readings: %.1f ms for at most %d steps\n", ms, o.budget);
  EXPECT_TRUE(ended);
  EXPECT_TRUE(valid_instance(text, schema));
  EXPECT_LT(ms / o.budget, 1000.0) << "a step took a second on average";
}

// Plain text inside a string under a pattern: each plain-text token is run through the string's
// automaton directly (not byte by byte through the matcher, which took 125 ms a step here), also
// near the budget's end, where the completion the automaton leaves must still fit.
TEST(JsonConstraint, PatternStringsTakePlainTextTokensFast) {
  REQUIRE_TOKENIZER();
  auto table = std::make_shared<const JsonTokenTable>(tk);
  for (const char* text : {R"({"type":"string","pattern":"^a"})",
                           R"({"type":"object","properties":{"s":{"type":"string","pattern":"^[a-z ]*x$"}},"required":["s"]})"}) {
    const ojson schema = ojson::parse(text);
    auto g = compile_ok(schema);
    ASSERT_TRUE(g);
    for (int budget : {12, 100}) {
      JsonConstraintOptions o;
      o.budget = budget;
      Constraint c = make_json_constraint(g, table, tk, o);
      std::mt19937 rng(5);
      bool ended = false;
      const auto t0 = std::chrono::steady_clock::now();
      const std::string out = generate(tk, c, rng, budget, &ended);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s, budget %d: %.1f ms per step\n", text, budget, ms / budget);
      EXPECT_TRUE(ended) << out;
      EXPECT_TRUE(valid_instance(out, schema)) << "budget " << budget;
      EXPECT_LT(ms / budget, 1000.0) << "a step took a second on average";
    }
  }
}

TEST(JsonConstraint, ReasoningBudgetAndCombination) {
  REQUIRE_TOKENIZER();
  // The budget forces <channel|> after N thought tokens past the "thought\n" header; combined
  // constraints: the first that forces wins.
  Constraint budget = make_reasoning_budget_constraint(3, tk);
  std::vector<float> logits(8, 0.0f);
  std::vector<int32_t> gen = {tok::kChannelStart};
  tk.encode_text("thought\n", gen);
  gen.insert(gen.end(), {10, 11});
  EXPECT_EQ(budget(logits, gen), -1);
  gen.push_back(12);
  EXPECT_EQ(budget(logits, gen), tok::kChannelEnd);
  gen.push_back(tok::kChannelEnd);
  EXPECT_EQ(budget(logits, gen), -1);
  Constraint ban_two = [](std::span<float> l, std::span<const int32_t>) -> int32_t {
    l[2] = -std::numeric_limits<float>::infinity();
    return -1;
  };
  Constraint force_five = [](std::span<float>, std::span<const int32_t>) -> int32_t { return 5; };
  Constraint both = combine_constraints({ban_two, {}, force_five});
  EXPECT_EQ(both(logits, gen), 5);
  EXPECT_TRUE(std::isinf(logits[2]));
  EXPECT_FALSE(combine_constraints({{}, {}}));
}

}  // namespace
}  // namespace gem::chat

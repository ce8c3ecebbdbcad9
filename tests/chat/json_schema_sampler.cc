// Random instances of a JSON schema through the byte-level matcher, for an independent validator
// (tests/e2e/json_schema_samples.mjs checks them with Ajv and ajv-formats): random walks that
// take any byte the matcher accepts (mostly printable ASCII, some of everything else), then the
// shortest completion. At every step the completion must be accepted and end in a whole
// instance, else the walk reports a dead end and the program exits 2.
//
//   json_schema_sampler SCHEMA_FILE N SEED   prints N lines, each the JSON string of one output;
//                                            a schema that does not compile: "error: <message>",
//                                            exit 3.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "chat/json_schema.h"

using gem::chat::JsonMatcher;
using ojson = nlohmann::ordered_json;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SCHEMA_FILE N SEED\n", argv[0]);
    return 1;
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  const ojson schema = ojson::parse(text.str(), nullptr, false);
  if (schema.is_discarded()) {
    std::fprintf(stderr, "%s: not JSON\n", argv[1]);
    return 1;
  }
  auto g = gem::chat::compile_json_schema(schema, "schema");
  if (!g.ok()) {
    std::printf("error: %s\n", g.message().c_str());
    return 3;
  }
  const int n = std::atoi(argv[2]);
  std::mt19937 rng(static_cast<uint32_t>(std::atoi(argv[3])));
  for (int trial = 0; trial < n; ++trial) {
    JsonMatcher m(*g);
    std::string out;
    const int steps = static_cast<int>(rng() % 400);
    // Some walks lean towards opening values ('[' '{' '"'), to reach deep recursion.
    const bool deep = trial % 4 == 0;
    for (int i = 0; i < steps && !m.finished(); ++i) {
      std::vector<int> ok, printable, opening;
      for (int c = 0; c < 256; ++c) {
        const char ch = static_cast<char>(c);
        if (!m.accepts(std::string_view(&ch, 1))) continue;
        ok.push_back(c);
        if (c >= 0x20 && c < 0x7F) printable.push_back(c);
        if (c == '[' || c == '{' || c == '"' || c == ',') opening.push_back(c);
      }
      if (ok.empty() && m.accepting()) break;  // a top-level number that can take no more digits
      if (ok.empty()) {
        std::printf("dead end: no byte after %s\n", ojson(out).dump().c_str());
        return 2;
      }
      const std::vector<int>& from = deep && !opening.empty() && rng() % 2 == 0 ? opening
                                     : !printable.empty() && rng() % 8 != 0     ? printable
                                                                                : ok;
      const char ch = static_cast<char>(from[rng() % from.size()]);
      m.feed(std::string_view(&ch, 1));
      out += ch;
      JsonMatcher check = m;
      const std::string rest = check.shortest_completion();
      if (!check.feed(rest) || !check.accepting()) {
        std::printf("dead end: completion %s refused after %s\n", ojson(rest).dump().c_str(),
                    ojson(out).dump().c_str());
        return 2;
      }
    }
    const std::string rest = m.shortest_completion();
    if (!m.feed(rest) || !m.accepting()) {
      std::printf("dead end: completion %s refused after %s\n", ojson(rest).dump().c_str(),
                  ojson(out).dump().c_str());
      return 2;
    }
    std::printf("%s\n", ojson(out + rest).dump(-1, ' ', false, ojson::error_handler_t::strict).c_str());
  }
  return 0;
}

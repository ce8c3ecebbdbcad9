// A deterministic mixed-text generator for tokenizer benchmarks and cross-checks: prose, code,
// JSON, CJK, Cyrillic/accented Latin, emoji (with modifiers and ZWJ) and whitespace runs, in
// blocks. The same size always gives the same bytes (std::mt19937's raw output is specified).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gem::bench {

inline std::string mixed_text(size_t n_bytes) {
  std::mt19937 rng(20260430);
  auto pick = [&](const std::vector<std::string>& v) -> const std::string& { return v[rng() % v.size()]; };
  const std::vector<std::string> words = {
      "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
      "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
      "they", "you", "were", "her", "she", "there", "would", "their", "we", "him", "been", "has",
      "when", "who", "will", "more", "model", "token", "inference", "server", "gradient",
      "attention", "window", "quantization", "throughput", "latency", "streaming", "Gemma",
      "remarkable", "understanding", "configuration", "internationalization", "don't", "it's",
      "we'll", "they're", "café", "naïve", "résumé", "Zürich", "Ångström", "coöperate"};
  const std::vector<std::string> code = {
      "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
      "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
      "\tif (x->next != nullptr && x->next->value >= limit) return Status::error(\"too big\");\n",
      "#include <vector>\n#include \"base/status.h\"\n\nnamespace gem {\n",
      "    const auto& [key, value] = *it;  // structured binding\n",
      "SELECT id, name FROM users WHERE created_at > '2024-01-01' ORDER BY id DESC LIMIT 10;\n",
      "<div class=\"row\"><span id=\"x1\">Hello</span><br/></div>\n",
      "https://example.com/path/to/page?query=value&lang=en#section-2\n",
      "        x = np.einsum('bhqd,bhkd->bhqk', q, k) / math.sqrt(d)\n",
      "}\n\n", "\t\t\treturn;\n", "  // TODO(#42): handle the empty case\n"};
  const std::vector<std::string> cjk = {
      "日本語のテキストを分割します。", "我想在苹果工作，因为那里的人很好。", "東京は日本の首都です。",
      "人工智能正在改变世界。", "今日はいい天気ですね！", "한국어 문장도 포함합니다.", "机器学习模型的推理速度"};
  const std::vector<std::string> other = {
      "Привет, как дела? Всё хорошо.", "Съешь же ещё этих мягких французских булок.",
      "Ελληνικά γράμματα", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "Äpfel und Öl kosten 3,50 €",
      "ﬁne ﬂour ½ cup ™ © ° ± × ÷", "e\u0301te\u0301 n\u0303o Z\u0351\u0352"};
  const std::vector<std::string> emoji = {"😀", "😁", "🦙", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🎉", "🚀", "🤖", "✅", "🔥"};

  std::string s;
  s.reserve(n_bytes + 4096);
  while (s.size() < n_bytes) {
    const uint32_t kind = rng() % 10;
    if (kind < 4) {  // prose paragraph
      const int n_sent = 2 + int(rng() % 5);
      for (int k = 0; k < n_sent; ++k) {
        const int n_words = 4 + int(rng() % 14);
        for (int w = 0; w < n_words; ++w) {
          std::string word = pick(words);
          if (w == 0 && word[0] >= 'a' && word[0] <= 'z') word[0] = char(word[0] - 32);
          if (w > 0) s += ' ';
          s += word;
          if (rng() % 12 == 0) s += ",";
          if (rng() % 40 == 0) {
            s += ' ';
            s += std::to_string(rng() % 100000);
          }
        }
        s += (rng() % 6 == 0) ? "? " : ". ";
      }
      s += (rng() % 3 == 0) ? "\n\n" : "\n";
    } else if (kind < 6) {  // code
      const int n = 2 + int(rng() % 6);
      for (int k = 0; k < n; ++k) s += pick(code);
    } else if (kind == 6) {  // JSON
      // Appended piece by piece: GCC 12's -Wrestrict misfires on chains of operator+.
      s += "{\"id\": ";
      s += std::to_string(rng() % 1000000);
      s += ", \"name\": \"";
      s += pick(words);
      s += "\", \"tags\": [\"";
      s += pick(words);
      s += "\", \"";
      s += pick(words);
      s += "\"], \"score\": ";
      s += std::to_string(rng() % 1000);
      s += '.';
      s += std::to_string(rng() % 100);
      s += ", \"nested\": {\"ok\": true, \"value\": null, \"text\": \"line\\nbreak \\\"quoted\\\"\"}}\n";
    } else if (kind == 7) {  // CJK
      const int n = 1 + int(rng() % 4);
      for (int k = 0; k < n; ++k) s += pick(cjk);
      s += "\n";
    } else if (kind == 8) {  // other scripts and emoji
      s += pick(other);
      s += ' ';
      const int n = 1 + int(rng() % 4);
      for (int k = 0; k < n; ++k) s += pick(emoji);
      s += "\n";
    } else {  // whitespace runs
      const uint32_t w = rng() % 4;
      const int n = 1 + int(rng() % 40);
      s += w == 0 ? std::string(n, ' ') : w == 1 ? std::string(n, '\t') : w == 2 ? std::string(n, '\n')
                                                                               : std::string(" \t \n");
      s += pick(words);
      s += "\n";
    }
  }
  return s;
}

}  // namespace gem::bench

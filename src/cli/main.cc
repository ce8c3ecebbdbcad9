// main: builds the CLI11 app from the registered subcommands and runs the chosen one. Before
// parsing, llama-server's multi-letter short flags (-ngl, -fa, -ctk, -ctv, -np, -ub, -cb, -nocb),
// which CLI11 cannot name, become their long forms; after it, an unknown flag is an error that
// names the nearest flag the subcommand has (edit distance).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cli/build_info.h"
#include "cli/command.h"

namespace gem::cli {

std::vector<Command>& command_table() {
  static std::vector<Command> table;
  return table;
}

int register_command(Command command) {
  command_table().push_back(std::move(command));
  return 0;
}

int fail(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "gem %s: %s\n", command.c_str(), message.c_str());
  return 1;
}

namespace {

// llama-server's spellings CLI11 cannot declare (short names are one letter there).
const std::map<std::string, std::string>& short_aliases() {
  static const std::map<std::string, std::string> m = {
      {"-ngl", "--n-gpu-layers"}, {"-fa", "--flash-attn"},   {"-ctk", "--cache-type-k"},
      {"-ctv", "--cache-type-v"}, {"-np", "--parallel"},     {"-ub", "--ubatch-size"},
      {"-cb", "--cont-batching"}, {"-nocb", "--no-cont-batching"}};
  return m;
}

// argv with the aliases above replaced, up to a "--" (what follows belongs to a command that
// `gem agent` runs). "-ngl=99" becomes "--n-gpu-layers=99".
std::vector<std::string> rewrite_args(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i] == "--") break;
    const size_t eq = out[i].find('=');
    const std::string name = out[i].substr(0, eq);
    auto it = short_aliases().find(name);
    if (it != short_aliases().end()) {
      out[i] = it->second + (eq == std::string::npos ? "" : out[i].substr(eq));
    }
  }
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b);

// A misspelt multi-letter short flag ("-ngll", "-ctkv"): CLI11 would read it as a one-letter
// flag with the rest as its value ("-n" "gll"), so it is caught before parsing.
std::string misspelt_alias(const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.size() < 4 || a[0] != '-' || a[1] == '-') continue;
    if (!std::all_of(a.begin() + 1, a.end(), [](char c) { return c >= 'a' && c <= 'z'; })) continue;
    for (const auto& [alias, target] : short_aliases()) {
      if (a.rfind(alias, 0) == 0 || edit_distance(a, alias) <= 1) return a;
    }
  }
  return "";
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Every spelling of every flag `sub` has, llama-server's short aliases included.
std::vector<std::string> known_flags(const CLI::App& sub) {
  std::vector<std::string> names;
  for (const CLI::Option* o : sub.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  for (const auto& [alias, target] : short_aliases()) {
    if (std::find(names.begin(), names.end(), target) != names.end()) names.push_back(alias);
  }
  return names;
}

// "unknown option --ctx-sise (did you mean --ctx-size?)" for the first unexpected argument.
std::string unknown_argument_message(const CLI::App& sub, const std::string& arg) {
  if (arg.empty() || arg[0] != '-' || arg == "-") return "unexpected argument '" + arg + "'";
  std::string name = arg.substr(0, arg.find('='));
  // The user's own spelling, when main rewrote it.
  for (const auto& [alias, target] : short_aliases()) {
    if (name == target) name = alias;
  }
  // Nearest: a flag that the argument starts with (--temperature: --temp) or that starts with
  // it, else the smallest edit distance.
  std::string best;
  std::pair<int, size_t> best_score{2, SIZE_MAX};
  for (const std::string& k : known_flags(sub)) {
    const bool prefix = k.size() > 2 && (name.rfind(k, 0) == 0 || k.rfind(name, 0) == 0);
    const std::pair<int, size_t> score{prefix ? 0 : 1, edit_distance(name, k)};
    if (score < best_score) {
      best_score = score;
      best = k;
    }
  }
  std::string msg = "unknown option " + name;
  if (!best.empty()) msg += " (nearest: " + best + ")";
  return msg + "; see gem " + sub.get_name() + " --help";
}

}  // namespace

}  // namespace gem::cli

int main(int argc, char** argv) {
  using namespace gem::cli;
  CLI::App app{"gem: an inference server for Google's Gemma 4 dense models (12B, 31B)", "gem"};
  app.set_version_flag("--version", std::string("gem ") + GEM_VERSION + " (" + build_commit() + ")");
  app.require_subcommand(1);
  std::vector<Command> table = command_table();
  std::sort(table.begin(), table.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  std::map<CLI::App*, RunFn> runs;
  for (const Command& c : table) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runs[sub] = c.setup(*sub);
    sub->allow_extras();  // checked below, to name the nearest known flag
  }
  std::vector<std::string> args = rewrite_args(argc, argv);
  if (const std::string misspelt = misspelt_alias(args); !misspelt.empty()) {
    for (auto& [sub, run] : runs) {
      if (std::find(args.begin() + 1, args.end(), sub->get_name()) == args.end()) continue;
      std::fprintf(stderr, "gem %s: %s\n", sub->get_name().c_str(),
                   unknown_argument_message(*sub, misspelt).c_str());
      return static_cast<int>(CLI::ExitCodes::ExtrasError);
    }
  }
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  // The first argument before "--" that names no flag of the subcommand.
  auto first_unknown = [&](const CLI::App& sub) -> std::string {
    const std::vector<std::string> known = known_flags(sub);
    for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
      const std::string& a = args[i];
      if (a.size() < 2 || a[0] != '-' || std::isdigit(static_cast<unsigned char>(a[1]))) continue;
      const std::string name = a.rfind("--", 0) == 0 ? a.substr(0, a.find('=')) : a.substr(0, 2);
      if (std::find(known.begin(), known.end(), name) == known.end()) return a;
    }
    return "";
  };
  try {
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ExtrasError& e) {
    // An unknown flag took the next word as its value, which then had nowhere to go.
    for (auto& [sub, run] : runs) {
      if (!sub->parsed()) continue;
      if (const std::string u = first_unknown(*sub); !u.empty()) {
        std::fprintf(stderr, "gem %s: %s\n", sub->get_name().c_str(),
                     unknown_argument_message(*sub, u).c_str());
        return static_cast<int>(CLI::ExitCodes::ExtrasError);
      }
    }
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, run] : runs) {
    if (!sub->parsed()) continue;
    std::vector<std::string> extra = sub->remaining();
    std::erase(extra, std::string("--"));  // the separator before `gem agent`'s command
    if (!extra.empty()) {
      std::fprintf(stderr, "gem %s: %s\n", sub->get_name().c_str(),
                   unknown_argument_message(*sub, extra.front()).c_str());
      return static_cast<int>(CLI::ExitCodes::ExtrasError);
    }
  }
  for (auto& [sub, run] : runs) {
    if (sub->parsed()) {
      try {
        return run();
      } catch (const std::exception& e) {
        return fail(sub->get_name(), std::string("unexpected error: ") + e.what());
      }
    }
  }
  return 1;
}

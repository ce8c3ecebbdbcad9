// main: builds the CLI11 app from the registered subcommands and runs the chosen one.
#include <algorithm>
#include <cstdio>
#include <map>

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
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
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

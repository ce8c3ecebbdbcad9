// The `gem` subcommand table. Each cmd_*.cc registers one subcommand: a setup function adds its
// options to a CLI11 subcommand and returns the function that runs it (returning the exit code).
// Only src/cli chooses exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace gem::cli {

using RunFn = std::function<int()>;
using SetupFn = std::function<RunFn(CLI::App& sub)>;

struct Command {
  std::string name;
  std::string help;
  SetupFn setup;
};

std::vector<Command>& command_table();
int register_command(Command command);

// Prints "gem <cmd>: <message>" to stderr and returns exit code 1.
int fail(const std::string& command, const std::string& message);

}  // namespace gem::cli

#define GEM_COMMAND(ident, help, setup) \
  static const int gem_command_##ident = ::gem::cli::register_command({#ident, help, setup})

// gem agent [serve options] -- COMMAND [ARGS...]: serves the model on a free loopback port, waits
// until it is ready, runs COMMAND pointed at it, forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT to it,
// stops the server when it ends and exits with its status (128 + signal when it was killed).
//
// The command's environment: OPENAI_BASE_URL and OPENAI_API_KEY for OpenAI-style clients, and
// for hax (v0.4.0, src/config.c and src/provider.c) HAX_LLAMACPP_BASE_URL (+ HAX_LLAMACPP_API_KEY
// with a key) and HAX_PROVIDER=llamacpp, the id of its llama.cpp provider, unless HAX_PROVIDER is
// already set (hax treats a set variable, even empty, as the user's choice).
//
// An MTP assistant named mtp-<model file name> in the model's folder is used for speculative
// decoding (as --mtp) unless --mtp names another or --no-mtp is given.
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/log.h"
#include "cli/command.h"
#include "cli/mtp_flags.h"
#include "cli/serve_common.h"

extern char** environ;

namespace gem::cli {
namespace {

struct AgentArgs {
  ServeArgs serve;
  std::vector<std::string> command;
};

int run_agent(AgentArgs& a) {
  set_log_level(a.serve.verbose ? LogLevel::kDebug : LogLevel::kWarn);
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  a.serve.port = 0;  // a free port, chosen at bind time
  if (a.serve.host != "127.0.0.1" && a.serve.host != "localhost" && a.serve.host != "::1") {
    GEM_LOG_WARN("agent: binding %s; the server is reachable beyond loopback", a.serve.host.c_str());
  }
  if (Status st = resolve_api_key(a.serve); !st.ok()) return fail("agent", st.message());
  // The MTP assistant beside the model (mtp-<model file name>) drafts unless --mtp names another
  // or --no-mtp turns drafting off.
  if (a.serve.mtp.mtp.empty() && !a.serve.mtp.no_mtp) {
    a.serve.mtp.mtp = assistant_beside(a.serve.model);
    if (!a.serve.mtp.mtp.empty()) {
      a.serve.notices.push_back("speculative decoding with " + a.serve.mtp.mtp +
                                ", found beside the model (--no-mtp: off)");
    }
  }
  print_notices("agent", a.serve);
  auto running = start_server(a.serve);
  if (!running.ok()) return fail("agent", running.message());
  RunningServer& rs = **running;
  Status st = load_into(a.serve, rs);
  if (!st.ok()) {
    rs.stop();
    return fail("agent", st.message());
  }
  const std::string host = a.serve.host == "0.0.0.0" ? "127.0.0.1" : a.serve.host;
  const std::string base = "http://" + host + ":" + std::to_string(rs.server->port()) + "/v1";

  // The child's environment: ours plus the endpoints.
  std::vector<std::string> env_strings;
  const bool provider_chosen = std::getenv("HAX_PROVIDER") != nullptr;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("OPENAI_BASE_URL=", 0) == 0 || kv.rfind("OPENAI_API_KEY=", 0) == 0 ||
        kv.rfind("HAX_LLAMACPP_BASE_URL=", 0) == 0 || kv.rfind("HAX_LLAMACPP_API_KEY=", 0) == 0) {
      continue;
    }
    env_strings.push_back(kv);
  }
  env_strings.push_back("OPENAI_BASE_URL=" + base);
  // The OpenAI SDKs refuse an empty key; without --api-key any value is accepted.
  env_strings.push_back("OPENAI_API_KEY=" + (a.serve.api_key.empty() ? std::string("sk-gem-local")
                                                                      : a.serve.api_key));
  env_strings.push_back("HAX_LLAMACPP_BASE_URL=" + base);
  if (!a.serve.api_key.empty()) env_strings.push_back("HAX_LLAMACPP_API_KEY=" + a.serve.api_key);
  if (!provider_chosen) env_strings.push_back("HAX_PROVIDER=llamacpp");
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (std::string& s : a.command) argv.push_back(s.data());
  argv.push_back(nullptr);

  // The child gets default signal handling and an empty mask.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, all_default;
  sigemptyset(&empty);
  sigemptyset(&all_default);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) sigaddset(&all_default, s);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all_default);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t child = -1;
  const int rc = posix_spawnp(&child, argv[0], nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    rs.stop();
    return fail("agent", strprintf("cannot run %s: %s", argv[0], std::strerror(rc)));
  }

  // Forward signals until the child exits.
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(child, &status, WNOHANG);
    if (w == child) break;
    if (w < 0 && errno != EINTR) break;
    timespec ts{0, 100 * 1000 * 1000};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) kill(child, sig);
  }
  rs.stop();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

RunFn setup_agent(CLI::App& sub) {
  auto args = std::make_shared<AgentArgs>();
  add_serve_options(sub, args->serve, /*with_port=*/false);
  sub.add_option("command", args->command, "the client to run, after --")->required();
  sub.footer("Example: gem agent -m model.gguf -- hax\n"
             "The command sees OPENAI_BASE_URL, OPENAI_API_KEY, HAX_LLAMACPP_BASE_URL and\n"
             "HAX_PROVIDER=llamacpp (unless HAX_PROVIDER is set already).");
  return [args] { return run_agent(*args); };
}

}  // namespace

GEM_COMMAND(agent, "serve a model on a free loopback port and run a client command against it",
            setup_agent);

}  // namespace gem::cli

// pathbench: the command-line entry point. Human output goes to stderr, machine output to stdout
// or files; bad input prints "pathbench: error: <what>" and exits with status 2. Exit statuses and
// signals: docs/guarantees.md.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <system_error>

#include "git_commit.h"
#include "core/error.h"
#include "core/io.h"
#include "runners/build_info.h"
#include "runners/commands.h"

namespace {

// The message on one line whatever it echoes: newlines and other control characters escaped.
std::string one_line(std::string_view text) {
  std::string out;
  for (const unsigned char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += char(c);
  }
  return out;
}

int report(std::string_view what, std::string_view message, int status) {
  fmt::print(stderr, "pathbench: {}{}\n", what, one_line(message));
  return status;
}

// SIGINT, SIGTERM, SIGHUP: the temporaries of the atomic writes in flight are removed, then the
// signal ends the process as it would have without the handler (a shell shows 128 + signal).
extern "C" void on_stop_signal(int sig) {
  pb::remove_live_temporaries();
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // delivered when the handler returns
}

void install_signal_handlers() {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // nohup, `&`
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

// A standard stream closed by the caller (`2>&-`) is opened on /dev/null, so that no file this
// process opens takes its number: stderr's lines then go nowhere, and stdout, opened read-only,
// fails its writes, which are reported.
void open_closed_std_streams() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY);
}

// Ends the process by `sig` after a command stopped cleanly on it (pb::Stopped).
int end_by_signal(int sig) {
  std::fflush(nullptr);
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  return 128 + sig;
}

int run(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-') {  // the first word is no command
      std::string names;
      for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; }))
        names += (names.empty() ? "" : ", ") + c->get_name();
      return report("error: ", fmt::format("unknown command '{}'; valid: {}", argv[1], names), 2);
    }
    return report("error: ", e.what(), 2);
  } catch (const pb::Stopped& e) {
    report("", e.what(), 0);
    return end_by_signal(e.signal);
  } catch (const pb::Error& e) {
    return report("error: ", e.what(), 2);
  } catch (const std::filesystem::filesystem_error& e) {  // on a path the user gave: --out, a run
    constexpr std::string_view prefix = "filesystem error: ";
    std::string_view message = e.what();
    if (message.substr(0, prefix.size()) == prefix) message.remove_prefix(prefix.size());
    return report("error: ", message, 2);
  } catch (const std::bad_alloc&) {
    return report("error: ", "out of host memory: reduce --batch, --eval-batch, --d-model, --layers or the task's len", 2);
  } catch (const std::system_error& e) {
    if (std::ferror(stdout)) return report("error: cannot write to standard output: ", e.code().message(), 2);
    return report("internal error: ", e.what(), 3);
  } catch (const std::exception& e) {
    return report("internal error: ", e.what(), 3);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  open_closed_std_streams();
  install_signal_handlers();
  CLI::App app{"pathbench: position encodings on synthetic reasoning tasks", "pathbench"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("pathbench " PATHBENCH_VERSION " (" PATHBENCH_GIT_COMMIT ", sources ") +
                                       pb::kSourcesDigest + ")");
  pb::add_list_command(app);
  pb::add_gen_command(app);
  pb::add_train_command(app);
  pb::add_convert_command(app);
  pb::add_eval_command(app);
  pb::add_generate_command(app);
  pb::add_attention_command(app);
  pb::add_bench_command(app);
  pb::add_sweep_command(app);
  pb::add_collect_command(app);
  pb::add_table_command(app);
  pb::add_plot_command(app);
  const int status = run(app, argc, argv);
  if (status == 0 && (std::fflush(stdout) != 0 || std::ferror(stdout)))  // a full disk, a closed stdout
    return report("error: cannot write to standard output: ", std::strerror(errno), 2);
  return status;
}

#include "lmt/base/stop_signal.h"

#include <atomic>
#include <csignal>

namespace lmt {
namespace {

std::atomic<int> g_requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (!g_requested.compare_exchange_strong(expected, sig) && sig == SIGINT) {
    std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C: stop now
    std::raise(SIGINT);
  }
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // interrupted reads and writes resume; the loop polls the flag
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

int stop_requested() { return g_requested.load(std::memory_order_relaxed); }

void reset_stop_request() { g_requested.store(0); }

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

}  // namespace lmt

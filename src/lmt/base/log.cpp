#include "lmt/base/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace lmt {
namespace {

// A value parse_log_level() refuses leaves INFO here; lmtrain's main() checks the variable first and
// exits 2 naming it, so only library users (tests) can reach the fallback.
LogLevel LevelFromEnv() {
  const char* env = std::getenv("LMT_LOG_LEVEL");
  LogLevel level = LogLevel::INFO;
  if (env != nullptr) parse_log_level(env, &level);
  return level;
}

std::atomic<int> g_level{static_cast<int>(LevelFromEnv())};
std::mutex g_mu;
std::string g_prefix;  // guarded by g_mu

}  // namespace

bool parse_log_level(const std::string& text, LogLevel* level) {
  static const struct { const char* name; LogLevel level; } kLevels[] = {
      {"debug", LogLevel::DEBUG}, {"info", LogLevel::INFO}, {"warning", LogLevel::WARNING}, {"error", LogLevel::ERROR}};
  for (const auto& l : kLevels)
    if (text == l.name) {
      *level = l.level;
      return true;
    }
  return false;
}
const char* log_level_names() { return "debug, info, warning, error"; }

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_prefix = prefix;
}

namespace internal {

LogLine::~LogLine() {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "[lmt %c %02d:%02d:%02d.%03d%s%s] %s\n", kLetters[static_cast<int>(level_)],
               tm.tm_hour, tm.tm_min, tm.tm_sec, ms, g_prefix.empty() ? "" : " ",
               g_prefix.c_str(), stream_.str().c_str());
}

}  // namespace internal
}  // namespace lmt

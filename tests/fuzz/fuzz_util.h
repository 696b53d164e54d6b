// Helpers shared by the libFuzzer targets of tests/fuzz (header-only; each target is one .cpp).
//
// Scratch files. Parsers that only take a path get the fuzz input written to a file first, in a
// per-process directory: $LMT_FUZZ_TMP/<pid> when scripts/fuzz.sh sets it (a folder in /dev/shm it
// removes afterwards), else /dev/shm/lmt-fuzz-<pid> (or $TMPDIR/... without /dev/shm). The directory
// is removed at a normal exit; after a crash, the runner cleans it up.
//
// Seeds. Every target can write valid inputs of its format, built in code with the project's own
// writers: LMT_FUZZ_SEEDS(fn) defines LLVMFuzzerInitialize so that running the target with
// LMT_FUZZ_WRITE_SEEDS=DIR calls fn(DIR) and exits 0 (scripts/fuzz.sh does it before each run).
// Without that variable, the target fuzzes as usual.
//
// Checks. A target aborts (a crash libFuzzer reports and saves) when a parser breaks a promise of
// its header beyond "no crash": an out-of-range id, a span outside the input, a valid seed
// rejected. Exceptions are never caught here: one that escapes a parser is a crash too.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace lmt::fuzz {

// Prints `what` and aborts: a broken promise, reported by libFuzzer like any crash.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz check failed: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors.
  static const std::string* dir = [] {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string base;
    if (const char* t = std::getenv("LMT_FUZZ_TMP"); t && *t) base = t;
    else if (fs::is_directory("/dev/shm", ec)) base = "/dev/shm";
    else base = fs::temp_directory_path(ec).string();
    auto* d = new std::string(base + "/lmt-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(*d, ec);
    fs::create_directories(*d, ec);
    if (ec) fail("cannot create the scratch directory " + *d + ": " + ec.message());
    std::atexit([] {
      std::error_code e;
      std::filesystem::remove_all(scratch_dir(), e);
    });
    return d;
  }();
  return *dir;
}

// Writes `bytes` to `path`, replacing it.
inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail("cannot write " + path);
}

// The whole file (for seed writers that let a project writer make a file first).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// scratch_dir()/name (subdirectories created), holding `bytes`; returns its path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  write_file(path, bytes);
  return path;
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits `in` at the first `sep`: {before, after}; after is empty (and *found false) when absent.
inline std::pair<std::string_view, std::string_view> split_once(std::string_view in, char sep, bool* found = nullptr) {
  const size_t at = in.find(sep);
  if (found) *found = at != std::string_view::npos;
  if (at == std::string_view::npos) return {in, {}};
  return {in.substr(0, at), in.substr(at + 1)};
}

using SeedWriter = void (*)(const std::string& dir);

inline void maybe_write_seeds(SeedWriter writer) {
  const char* dir = std::getenv("LMT_FUZZ_WRITE_SEEDS");
  if (!dir || !*dir) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  writer(dir);
  std::exit(0);
}

}  // namespace lmt::fuzz

#define LMT_FUZZ_SEEDS(writer)                                   \
  extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) { \
    lmt::fuzz::maybe_write_seeds(writer);                          \
    return 0;                                                      \
  }

// input_stream_fuzz: the decompressing reader (io/input_stream.h: open_input, LineReader,
// read_whole_input) on arbitrary files.
//
// Input: byte 0 picks the mode, byte 1 the LineReader's chunk size (1..256); the rest is the
// payload. Mode 0 writes the payload as the file (any format by its magic: plain, gzip, zstd,
// or a refused bz2/xz/zip). Mode 1 gzips it with zlib, mode 2 zstd-compresses it with libzstd,
// mode 3 writes two gzip members (the payload's halves).
// Checked beyond "no crash": a read either succeeds or returns kDataLoss/kInvalidArgument/kIoError;
// the lines joined with their '\n's equal read_whole_input(); modes 1-3 round-trip to the payload
// exactly, and the same file cut short by one byte is an error (never a silent short read).
// Seeds: real gzip/zstd streams of small texts, built here.
//   build-fuzz/bin/input_stream_fuzz -max_total_time=60 -max_len=4096 CORPUS_DIR
#include <zlib.h>
#include <zstd.h>

#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "lmt/io/input_stream.h"

namespace {

std::string gzip(std::string_view in, int level) {
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) lmt::fuzz::fail("deflateInit2");
  std::string out(deflateBound(&zs, in.size()) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) lmt::fuzz::fail("deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string zstd(std::string_view in, int level) {
  std::string out(ZSTD_compressBound(in.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), level);
  if (ZSTD_isError(n)) lmt::fuzz::fail("ZSTD_compress");
  out.resize(n);
  return out;
}

void write_seeds(const std::string& dir) {
  const std::string text = "{\"text\": \"first line\"}\n\n{\"text\": \"second\"}\r\nlast line without newline";
  auto seed = [&](const char* name, char mode, const std::string& payload) {
    lmt::fuzz::write_file(dir + "/" + name, std::string(1, mode) + std::string(1, '\x07') + payload);
  };
  seed("plain", 0, text);
  seed("gzip_file", 0, gzip(text, 6));
  seed("zstd_file", 0, zstd(text, 3));
  seed("two_members", 0, gzip(text, 1) + gzip("", 9) + gzip(text, 9));
  seed("two_frames", 0, zstd(text, 1) + zstd(text, 19));
  seed("gzip_roundtrip", 1, text);
  seed("zstd_roundtrip", 2, text);
  seed("members_roundtrip", 3, text);
}

// Reads `path` whole and by lines; checks they agree. False (after checking the error) on error.
bool read_both(const std::string& path, size_t chunk, std::string* whole) {
  auto check_code = [&](const lmt::Status& s) {
    using lmt::StatusCode;
    if (s.code() != StatusCode::kDataLoss && s.code() != StatusCode::kInvalidArgument && s.code() != StatusCode::kIoError)
      lmt::fuzz::fail("unexpected error code: " + s.ToString());
    if (s.message().find(path) == std::string::npos) lmt::fuzz::fail("error does not name the file: " + s.ToString());
  };
  auto w = lmt::io::read_whole_input(path);
  auto in = lmt::io::open_input(path);
  if (!w.ok()) {
    check_code(w.status());
    if (in.ok()) {  // the same error comes back through the line reader
      lmt::io::LineReader lines(std::move(*in), chunk);
      std::string_view line;
      for (;;) {
        auto more = lines.next(&line);
        if (!more.ok()) return false;
        if (!*more) lmt::fuzz::fail("the line reader read to the end where read_whole_input failed");
      }
    }
    return false;
  }
  if (!in.ok()) lmt::fuzz::fail("open_input failed where read_whole_input did not");
  lmt::io::LineReader lines(std::move(*in), chunk);
  std::string joined;
  std::string_view line;
  for (;;) {
    auto more = lines.next(&line);
    if (!more.ok()) lmt::fuzz::fail("the line reader failed where read_whole_input did not: " + more.status().ToString());
    if (!*more) break;
    joined.append(line);
    if (lines.had_newline()) joined.push_back('\n');
  }
  if (joined != *w) lmt::fuzz::fail("lines joined differ from the whole content");
  *whole = std::move(*w);
  return true;
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int mode = data[0] % 4;
  const size_t chunk = size_t{1} + data[1];
  const std::string_view payload = lmt::fuzz::as_view(data + 2, size - 2);
  std::string file;
  switch (mode) {
    case 0: file.assign(payload); break;
    case 1: file = gzip(payload, data[0] / 4 % 10); break;
    case 2: file = zstd(payload, 1 + data[0] / 4 % 5); break;
    default: file = gzip(payload.substr(0, payload.size() / 2), 6) + gzip(payload.substr(payload.size() / 2), 1); break;
  }
  const std::string path = lmt::fuzz::write_scratch("input.bin", file);
  std::string whole;
  const bool ok = read_both(path, chunk, &whole);
  if (mode == 0) return 0;
  if (!ok) lmt::fuzz::fail("a stream compressed here does not read back");
  if (whole != payload) lmt::fuzz::fail("the round trip differs from the payload");
  lmt::fuzz::write_file(path, std::string_view(file).substr(0, file.size() - 1));
  std::string cut;
  if (read_both(path, chunk, &cut)) lmt::fuzz::fail("a stream cut by one byte read without an error");
  return 0;
}

// The files the stages of `data clean` hand to each other inside DIR.tmp/<stage>/ (pipeline.h):
//   records.tsv  one kept document per line: "<doc index>\t<JSON string of its source>\t<record>",
//                where the record is the output JSONL object (one line) and the source "path:line";
//   removed.jsonl  one object per removed document {doc, source, stage, reason, bytes, text};
//   stats.json   the stage's counts; DONE   the completion marker, written last.
// LineWriter appends through a buffer and makes the file durable on close (fsync). One thread each.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"
#include "lmt/io/mapped_file.h"

namespace lmt::clean {

struct StageRecord {
  int64_t doc = 0;
  std::string source;  // "path:line" or "path"
  std::string record;  // the JSONL object, one line
};

std::string encode_stage_record(const StageRecord& r);
// Errors: kDataLoss naming `path` and the line.
StatusOr<StageRecord> decode_stage_record(std::string_view line, const std::string& path, int64_t line_no);

class LineWriter {
 public:
  static StatusOr<LineWriter> create(const std::string& path);
  LineWriter(LineWriter&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_), buf_(std::move(o.buf_)), bytes_(o.bytes_) { o.fd_ = -1; }
  LineWriter& operator=(LineWriter&&) = delete;
  ~LineWriter();
  Status write(std::string_view s);
  Status close();  // flush + fsync + close
  int64_t bytes() const { return bytes_; }

 private:
  LineWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  Status flush();
  std::string path_;
  int fd_ = -1;
  std::string buf_;
  int64_t bytes_ = 0;
};

// Reads records.tsv line by line (memory-mapped).
class StageReader {
 public:
  static StatusOr<StageReader> open(const std::string& path);
  StatusOr<bool> next(StageRecord* r);

 private:
  std::string path_;
  io::MappedFile map_;
  uint64_t offset_ = 0;
  int64_t line_ = 0;
};

// A histogram with fixed bin edges: counts[i] holds values in [edges[i], edges[i+1]); the last bin
// also takes values >= the last edge, the first those below the first edge.
struct Histogram {
  std::vector<double> edges;
  std::vector<int64_t> counts;
  static Histogram linear(double lo, double hi, int bins);
  static Histogram with_edges(std::vector<double> edges);
  void add(double v);
  void merge(const Histogram& o);
  nlohmann::json to_json() const;
  static Histogram from_json(const nlohmann::json& j);
};

Status write_done_marker(const std::string& stage_dir);
bool stage_done(const std::string& stage_dir);

}  // namespace lmt::clean

#include "lmt/clean/stage_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "lmt/io/atomic_file.h"
#include "lmt/io/files.h"

namespace lmt::clean {

std::string encode_stage_record(const StageRecord& r) {
  std::string s = std::to_string(r.doc);
  s += '\t';
  s += nlohmann::json(r.source).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  s += '\t';
  s += r.record;
  s += '\n';
  return s;
}

StatusOr<StageRecord> decode_stage_record(std::string_view line, const std::string& path, int64_t line_no) {
  auto bad = [&] { return DataLoss(path + ":" + std::to_string(line_no) + ": not a stage record", "remove the .tmp directory of the run and start it again"); };
  const size_t t1 = line.find('\t');
  if (t1 == std::string_view::npos || t1 == 0) return bad();
  const size_t t2 = line.find('\t', t1 + 1);
  if (t2 == std::string_view::npos) return bad();
  StageRecord r;
  r.doc = 0;
  for (size_t i = 0; i < t1; ++i) {
    if (line[i] < '0' || line[i] > '9') return bad();
    r.doc = r.doc * 10 + (line[i] - '0');
  }
  nlohmann::json src = nlohmann::json::parse(line.substr(t1 + 1, t2 - t1 - 1), nullptr, false);
  if (src.is_discarded() || !src.is_string()) return bad();
  r.source = src.get<std::string>();
  r.record.assign(line.substr(t2 + 1));
  return r;
}

StatusOr<LineWriter> LineWriter::create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot create " + path + ": " + io::errno_text(), "check the permissions and free space of the output's parent");
  return LineWriter(path, fd);
}

LineWriter::~LineWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status LineWriter::flush() {
  if (buf_.empty()) return Status::Ok();
  if (io::write_all(fd_, buf_.data(), buf_.size()) != 0) return IoError("cannot write " + path_ + ": " + io::errno_text(), "check the free space");
  buf_.clear();
  return Status::Ok();
}

Status LineWriter::write(std::string_view s) {
  if (fd_ < 0) return FailedPrecondition("write after close: " + path_);
  buf_.append(s);
  bytes_ += static_cast<int64_t>(s.size());
  if (buf_.size() >= (size_t{1} << 20)) return flush();
  return Status::Ok();
}

Status LineWriter::close() {
  if (fd_ < 0) return Status::Ok();
  LMT_RETURN_IF_ERROR(flush());
  if (::fsync(fd_) != 0) return IoError("cannot fsync " + path_ + ": " + io::errno_text());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return IoError("cannot close " + path_ + ": " + io::errno_text());
  return Status::Ok();
}

StatusOr<StageReader> StageReader::open(const std::string& path) {
  StageReader r;
  r.path_ = path;
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) > 0) {
    LMT_ASSIGN_OR_RETURN(r.map_, io::MappedFile::open_read_only(path));
  } else if (ec) {
    return IoError("cannot read " + path + ": " + ec.message(), "remove the .tmp directory of the run and start it again");
  }
  return r;
}

StatusOr<bool> StageReader::next(StageRecord* r) {
  if (offset_ >= map_.size()) return false;
  const char* base = reinterpret_cast<const char*>(map_.data()) + offset_;
  const size_t left = map_.size() - offset_;
  const char* nl = static_cast<const char*>(std::memchr(base, '\n', left));
  if (nl == nullptr) return DataLoss(path_ + ": the last line is incomplete", "remove the .tmp directory of the run and start it again");
  const size_t len = static_cast<size_t>(nl - base);
  offset_ += len + 1;
  ++line_;
  LMT_ASSIGN_OR_RETURN(*r, decode_stage_record(std::string_view(base, len), path_, line_));
  return true;
}

Histogram Histogram::linear(double lo, double hi, int bins) {
  std::vector<double> e;
  for (int i = 0; i <= bins; ++i) e.push_back(lo + (hi - lo) * i / bins);
  return with_edges(std::move(e));
}

Histogram Histogram::with_edges(std::vector<double> edges) {
  Histogram h;
  h.counts.assign(edges.size() - 1, 0);
  h.edges = std::move(edges);
  return h;
}

void Histogram::add(double v) {
  auto it = std::upper_bound(edges.begin(), edges.end(), v);
  size_t bin = it == edges.begin() ? 0 : static_cast<size_t>(it - edges.begin()) - 1;
  bin = std::min(bin, counts.size() - 1);
  ++counts[bin];
}

void Histogram::merge(const Histogram& o) {
  for (size_t i = 0; i < counts.size() && i < o.counts.size(); ++i) counts[i] += o.counts[i];
}

nlohmann::json Histogram::to_json() const { return {{"edges", edges}, {"counts", counts}}; }

Histogram Histogram::from_json(const nlohmann::json& j) {
  Histogram h;
  h.edges = j.at("edges").get<std::vector<double>>();
  h.counts = j.at("counts").get<std::vector<int64_t>>();
  return h;
}

Status write_done_marker(const std::string& stage_dir) {
  LMT_RETURN_IF_ERROR(io::write_file_atomically(stage_dir + "/DONE", "done\n"));
  return io::fsync_directory(stage_dir);
}

bool stage_done(const std::string& stage_dir) { return std::filesystem::exists(stage_dir + "/DONE"); }

}  // namespace lmt::clean

#include "lmt/data/dataset.h"

#include <algorithm>
#include <filesystem>

#include "lmt/base/xxh64.h"

namespace lmt::data {
namespace {

const char* kHint = "the dataset directory is inconsistent (mixed copies or an edited manifest); prepare it again";

}  // namespace

StatusOr<std::unique_ptr<Dataset>> Dataset::open(const std::string& dir, const std::string& split, Verify verify) {
  LMT_ASSIGN_OR_RETURN(Manifest manifest, read_manifest(dir));
  const SplitInfo* info = manifest.split(split);
  if (info == nullptr) return InvalidArgument("split '" + split + "' is unknown", "use train or val");
  if (info->tokens == 0)
    return FailedPrecondition("dataset " + dir + " has no '" + split + "' tokens",
                              split == "val" ? "prepare it again with a larger --val-fraction: whole documents are drawn at random "
                                                               "(about documents × fraction of them; a one-document input is split by tokens)"
                                             : "prepare it from inputs that hold some text");
  std::unique_ptr<Dataset> d(new Dataset());
  d->dir_ = dir;
  d->split_ = split;
  d->starts_.push_back(0);
  Xxh64 content(0x6c6d742d64617461ull);
  for (const ShardEntry& e : info->shards) {
    const std::string path = (std::filesystem::path(dir) / e.file).string();
    LMT_ASSIGN_OR_RETURN(ShardReader shard, ShardReader::open(path, verify));
    const ShardHeader& h = shard.header();
    auto mismatch = [&](const char* what, uint64_t in_shard, uint64_t in_manifest) {
      return DataLoss("shard " + path + ": " + what + " " + std::to_string(in_shard) + " differs from the manifest's " +
                          std::to_string(in_manifest),
                      kHint);
    };
    if (h.vocab_size != static_cast<uint64_t>(manifest.vocab_size))
      return mismatch("vocab_size", h.vocab_size, manifest.vocab_size);
    if (h.eos_id != static_cast<uint32_t>(manifest.eos_id)) return mismatch("eos id", h.eos_id, manifest.eos_id);
    if (h.token_bytes != manifest.token_bytes) return mismatch("token width", h.token_bytes, manifest.token_bytes);
    if (h.token_count != static_cast<uint64_t>(e.tokens)) return mismatch("token count", h.token_count, e.tokens);
    if (h.doc_count != static_cast<uint64_t>(e.documents)) return mismatch("document count", h.doc_count, e.documents);
    if (h.data_checksum != e.checksum)
      return DataLoss("shard " + path + ": checksum " + hex64(h.data_checksum) + " differs from the manifest's " +
                          hex64(e.checksum),
                      kHint);
    if (h.token_count == 0) return DataLoss("shard " + path + " holds no tokens", kHint);
    // A shard starts a document exactly when the stream before it ended one.
    const bool previous_ended = d->shards_.empty() ||
                                d->shards_.back().token(d->shards_.back().token_count() - 1) == manifest.eos_id;
    const bool starts_document = h.doc_count > 0 && shard.doc_starts()[0] == 0;
    if (previous_ended != starts_document)
      return DataLoss("shard " + path + (starts_document ? " starts a document although the previous shard ends inside one"
                                                         : " does not start a document although the previous shard ends with EOS"),
                      kHint);
    content.update(&h.data_checksum, sizeof h.data_checksum);
    d->starts_.push_back(d->starts_.back() + shard.token_count());
    d->shards_.push_back(std::move(shard));
  }
  if (d->starts_.back() != info->tokens)
    return DataLoss("dataset " + dir + ": the '" + split + "' shards hold " + std::to_string(d->starts_.back()) +
                        " tokens, the manifest says " + std::to_string(info->tokens),
                    kHint);
  const ShardReader& last = d->shards_.back();
  if (last.token(last.token_count() - 1) != manifest.eos_id)
    return DataLoss("shard " + last.path() + ": the last document does not end with EOS (truncated split?)", kHint);
  d->content_id_ = content.digest();
  d->manifest_ = std::move(manifest);
  return d;
}

int64_t Dataset::document_count() const {
  const SplitInfo* info = manifest_.split(split_);
  return info->documents;
}

std::pair<const ShardReader*, int64_t> Dataset::locate(int64_t offset) const {
  LMT_CHECK(offset >= 0 && offset < token_count()) << "offset " << offset << " of " << token_count();
  const size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
  return {&shards_[i], offset - starts_[i]};
}

void Dataset::read(int64_t start, int64_t n, int32_t* out) const {
  LMT_CHECK(start >= 0 && n >= 0 && start + n <= token_count())
      << dir_ << " " << split_ << ": read [" << start << ", " << start + n << ") of " << token_count();
  while (n > 0) {
    auto [shard, local] = locate(start);
    const int64_t take = std::min(n, shard->token_count() - local);
    shard->read(local, take, out);
    out += take;
    start += take;
    n -= take;
  }
}

}  // namespace lmt::data

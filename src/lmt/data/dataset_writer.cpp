#include "lmt/data/dataset_writer.h"

#include <cstdio>
#include <filesystem>

#include "lmt/io/atomic_file.h"

namespace lmt::data {
namespace fs = std::filesystem;

const char* split_name(Split split) { return split == Split::kTrain ? "train" : "val"; }

StatusOr<std::unique_ptr<DatasetWriter>> DatasetWriter::create(const std::string& dir, const DatasetSpec& spec) {
  if (spec.vocab_size <= 0 || spec.vocab_size > (int64_t{1} << 31))
    return InvalidArgument("vocabulary size " + std::to_string(spec.vocab_size) + " is outside [1, 2^31]");
  if (spec.eos_id < 0 || spec.eos_id >= spec.vocab_size)
    return InvalidArgument("EOS id " + std::to_string(spec.eos_id) + " is outside the vocabulary [0, " +
                           std::to_string(spec.vocab_size) + ")");
  if (spec.shard_tokens < 1)
    return InvalidArgument("--shard-tokens " + std::to_string(spec.shard_tokens) + " must be positive");
  fs::path target = fs::path(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/" -> "out"
  if (target.empty() || target.filename() == "." || target.filename() == "..")
    return InvalidArgument("output directory '" + dir + "' must name a new directory", "e.g. --out data/my-dataset");
  std::error_code ec;
  if (fs::exists(target, ec)) {
    if (!fs::is_directory(target, ec))
      return InvalidArgument("output " + dir + " exists and is not a directory", "choose a new --out directory");
    if (!fs::is_empty(target, ec))
      return InvalidArgument("output directory " + dir + " exists and is not empty",
                             "choose a new --out directory; prepare never overwrites a dataset");
  }
  LMT_ASSIGN_OR_RETURN(io::AtomicDirectory out,
                       io::AtomicDirectory::create(target.string(), io::AtomicDirectory::Staging::kHidden));
  return std::unique_ptr<DatasetWriter>(new DatasetWriter(std::move(out), spec));
}

// splits_ (unfinished shards: closed and unlinked) go before out_, which removes the staging directory.
DatasetWriter::~DatasetWriter() = default;

Status DatasetWriter::close_shard(Split split) {
  SplitState& s = splits_[static_cast<int>(split)];
  if (!s.shard) return Status::Ok();
  LMT_ASSIGN_OR_RETURN(ShardSummary done, s.shard->finish());
  s.shard.reset();
  s.info.shards.push_back({fs::path(done.path).filename().string(), done.tokens, done.documents, done.checksum});
  return Status::Ok();
}

Status DatasetWriter::ensure_room(Split split) {
  SplitState& s = splits_[static_cast<int>(split)];
  if (s.shard && s.shard->token_count() < spec_.shard_tokens) return Status::Ok();
  LMT_RETURN_IF_ERROR(close_shard(split));
  char name[64];
  std::snprintf(name, sizeof name, "%s-%06zu.bin", split_name(split), s.info.shards.size());
  LMT_ASSIGN_OR_RETURN(ShardWriter w, ShardWriter::create((fs::path(out_.tmp_path()) / name).string(),
                                                          ShardSpec{spec_.vocab_size, spec_.eos_id}));
  s.shard.emplace(std::move(w));
  return Status::Ok();
}

Status DatasetWriter::append(Split split, std::span<const int32_t> ids) {
  SplitState& s = splits_[static_cast<int>(split)];
  while (!ids.empty()) {
    LMT_RETURN_IF_ERROR(ensure_room(split));
    const size_t room = static_cast<size_t>(spec_.shard_tokens - s.shard->token_count());
    const size_t take = std::min(room, ids.size());
    LMT_RETURN_IF_ERROR(s.shard->append(ids.first(take)));
    ids = ids.subspan(take);
  }
  return Status::Ok();
}

Status DatasetWriter::add_document(Split split, std::span<const int32_t> ids) {
  LMT_CHECK(!out_.committed()) << "add_document() after commit()";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= spec_.vocab_size)
      return InvalidArgument("token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                             " is outside the vocabulary [0, " + std::to_string(spec_.vocab_size) + ")");
    if (ids[i] == spec_.eos_id)
      return InvalidArgument("token " + std::to_string(i) + " is the EOS id " + std::to_string(spec_.eos_id) +
                                 ", which may only end a document",
                             "the tokenizer's end-of-document token must not come out of ordinary text; "
                             "choose another with --eos");
  }
  SplitState& s = splits_[static_cast<int>(split)];
  LMT_RETURN_IF_ERROR(ensure_room(split));
  s.shard->start_document();
  LMT_RETURN_IF_ERROR(append(split, ids));
  const int32_t eos = spec_.eos_id;
  LMT_RETURN_IF_ERROR(append(split, std::span<const int32_t>(&eos, 1)));
  s.info.documents += 1;
  s.info.tokens += static_cast<int64_t>(ids.size()) + 1;
  return Status::Ok();
}

StatusOr<Manifest> DatasetWriter::commit(const nlohmann::json& preparation) {
  LMT_CHECK(!out_.committed()) << "commit() twice";
  LMT_RETURN_IF_ERROR(close_shard(Split::kTrain));
  LMT_RETURN_IF_ERROR(close_shard(Split::kVal));
  Manifest m;
  m.tokenizer_path = spec_.tokenizer_path;
  m.tokenizer_fingerprint = spec_.tokenizer_fingerprint;
  m.vocab_size = spec_.vocab_size;
  m.eos_id = spec_.eos_id;
  m.token_bytes = token_bytes_for_vocab(spec_.vocab_size);
  m.shard_tokens = spec_.shard_tokens;
  m.train = splits_[0].info;
  m.val = splits_[1].info;
  m.preparation = preparation;
  LMT_RETURN_IF_ERROR(io::write_file_atomically((fs::path(out_.tmp_path()) / kManifestFile).string(),
                                                manifest_to_json(m).dump(2) + "\n"));
  LMT_RETURN_IF_ERROR(out_.commit());  // never replaces a directory that filled up since create()
  return m;
}

}  // namespace lmt::data

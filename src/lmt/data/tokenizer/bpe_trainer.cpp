#include "lmt/data/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <limits>
#include <set>
#include <thread>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "lmt/base/timer.h"
#include "lmt/data/tokenizer/byte_level.h"
#include "lmt/data/tokenizer/corpus_reader.h"
#include "lmt/data/tokenizer/piece_counter.h"
#include "lmt/data/tokenizer/pretokenize.h"

namespace lmt::data {
namespace {

// RFC 3629 UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF): what a JSON writer
// may emit as text.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (b0 < 0x80) {
      ++i;
      continue;
    } else if ((b0 & 0xE0) == 0xC0) {
      n = 2, cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
      n = 3, cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
      n = 4, cp = b0 & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t min_cp = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

Status validate(const BpeTrainerOptions& o) {
  const int64_t min_vocab = 256 + static_cast<int64_t>(o.special_tokens.size());
  if (o.vocab_size < min_vocab)
    return InvalidArgument("--vocab-size " + std::to_string(o.vocab_size) + " is below " + std::to_string(min_vocab) +
                               ": the 256 byte tokens plus " + std::to_string(o.special_tokens.size()) +
                               " special token(s) already take that many ids",
                           "pass --vocab-size " + std::to_string(min_vocab) + " or more (32000 is a common choice)");
  if (o.vocab_size > std::numeric_limits<int32_t>::max())
    return InvalidArgument("--vocab-size " + std::to_string(o.vocab_size) + " does not fit token ids of 32 bits",
                           "pass a vocabulary size below 2^31");
  if (o.threads < 0) return InvalidArgument("--threads " + std::to_string(o.threads) + " is negative", "pass 0 (all cores) or more");
  std::set<std::string> seen;
  for (const std::string& s : o.special_tokens) {
    if (s.empty()) return InvalidArgument("a special token is the empty string", "drop the empty --special value");
    if (!valid_utf8(s))
      return InvalidArgument("special token '" + s + "' is not valid UTF-8", "tokenizer.json stores specials as UTF-8 text");
    if (!seen.insert(s).second)
      return InvalidArgument("special token '" + s + "' is given twice", "list each --special token once");
  }
  return Status::Ok();
}

std::string json_string(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }

}  // namespace

StatusOr<TrainedBpe> train_bpe(const BpeTrainerOptions& options,
                               const std::function<void(const BpeTrainProgress&)>& progress) {
  LMT_RETURN_IF_ERROR(validate(options));
  TrainedBpe bpe;
  bpe.pattern = options.pattern.empty() ? std::string(o200k_pattern()) : options.pattern;
  bpe.special_tokens = options.special_tokens;
  LMT_ASSIGN_OR_RETURN(Pretokenizer pretokenizer, Pretokenizer::create(bpe.pattern));

  CorpusOptions corpus;
  corpus.paths = options.inputs;
  corpus.text_field = options.text_field;
  corpus.block_bytes = options.block_bytes;
  corpus.special_tokens = options.special_tokens;
  LMT_ASSIGN_OR_RETURN(CorpusReader reader, CorpusReader::open(std::move(corpus)));

  PieceCountOptions count_options;
  count_options.threads = options.threads > 0 ? options.threads
                                              : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  count_options.special_tokens = options.special_tokens;
  auto count_progress = [&](uint64_t done, uint64_t total) {
    if (progress) progress({BpeTrainProgress::Phase::kCounting, done, total});
  };
  Timer count_timer;
  PieceCountStats counted;
  LMT_ASSIGN_OR_RETURN(std::vector<PieceCount> pieces,
                       count_pieces(&reader, pretokenizer, count_options, count_progress, &counted));
  bpe.stats.count_seconds = count_timer.seconds();
  bpe.stats.bytes = counted.bytes;
  bpe.stats.documents = counted.documents;
  bpe.stats.pieces = counted.pieces;
  bpe.stats.special_occurrences = counted.special_occurrences;
  bpe.stats.distinct_pieces = static_cast<int64_t>(pieces.size());

  Timer merge_timer;
  const int64_t max_tokens = options.vocab_size - static_cast<int64_t>(options.special_tokens.size());
  auto merge_progress = [&](int64_t done, int64_t total) {
    if (progress) progress({BpeTrainProgress::Phase::kMerging, static_cast<uint64_t>(done), static_cast<uint64_t>(total)});
  };
  LearnedMerges learned = learn_bpe_merges(pieces, max_tokens, merge_progress);
  bpe.stats.merge_seconds = merge_timer.seconds();
  bpe.tokens = std::move(learned.tokens);
  bpe.merges = std::move(learned.merges);

  // A special token must not share its text with an ordinary token's vocabulary entry: the
  // tokenizer.json vocab is keyed by that text.
  std::unordered_set<std::string> entries;
  for (const std::string& t : bpe.tokens) entries.insert(byte_level_encode(t));
  for (const std::string& s : bpe.special_tokens)
    if (entries.count(s))
      return InvalidArgument("special token '" + s + "' has the same text as the byte-level form of an ordinary token",
                             "choose a special token that does not look like one, e.g. <|name|>");
  return bpe;
}

std::string bpe_tokenizer_json(const TrainedBpe& bpe) {
  const int64_t first_special = static_cast<int64_t>(bpe.tokens.size());
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (size_t i = 0; i < bpe.special_tokens.size(); ++i) {
    added.push_back({{"id", first_special + static_cast<int64_t>(i)}, {"content", bpe.special_tokens[i]},
                     {"single_word", false}, {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                     {"special", true}});
  }
  // The ByteLevel step runs after the regex Split, so its own (GPT-2) regex stays off.
  const nlohmann::ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  const nlohmann::ordered_json split = {
      {"type", "Split"}, {"pattern", {{"Regex", bpe.pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
  // vocab and merges are spliced in as text below: ordered_json looks keys up linearly on insert,
  // which is quadratic for a 100k-entry vocabulary, and the ids must stay in id order.
  const nlohmann::ordered_json doc = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}}},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", "@VOCAB@"}, {"merges", "@MERGES@"}}}};
  std::string text = doc.dump(2);

  std::string vocab = "{";
  auto add_entry = [&](const std::string& key, int64_t id) {
    vocab += id == 0 ? "\n      " : ",\n      ";
    vocab += json_string(key);
    vocab += ": ";
    vocab += std::to_string(id);
  };
  for (size_t id = 0; id < bpe.tokens.size(); ++id) add_entry(byte_level_encode(bpe.tokens[id]), static_cast<int64_t>(id));
  for (size_t i = 0; i < bpe.special_tokens.size(); ++i) add_entry(bpe.special_tokens[i], first_special + static_cast<int64_t>(i));
  vocab += "\n    }";

  std::string merges = "[";
  for (size_t r = 0; r < bpe.merges.size(); ++r) {
    merges += r == 0 ? "\n      " : ",\n      ";
    merges += json_string(byte_level_encode(bpe.tokens[bpe.merges[r].left]) + " " +
                          byte_level_encode(bpe.tokens[bpe.merges[r].right]));
  }
  merges += bpe.merges.empty() ? "]" : "\n    ]";

  auto splice = [&text](std::string_view placeholder, const std::string& value) {
    const size_t at = text.rfind(placeholder);  // the model comes last
    LMT_CHECK(at != std::string::npos) << "placeholder " << placeholder << " missing from the JSON skeleton";
    text.replace(at, placeholder.size(), value);
  };
  splice("\"@VOCAB@\"", vocab);
  splice("\"@MERGES@\"", merges);
  text += "\n";
  return text;
}

}  // namespace lmt::data

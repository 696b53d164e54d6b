// The pipeline behind every loader. Hot path (encode): at most one copy of the text (only when a
// text step changes it), piece views into it, and thread-local scratch vectors, so steady-state
// encoding allocates nothing but the output.
#include "lmt/data/tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "lmt/data/tokenizer/nfc.h"
#include "lmt/data/tokenizer/sha256.h"

namespace lmt::data {
namespace {

void replace_all(std::string* s, std::string_view from, std::string_view to) {
  if (from.empty() || s->find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s->size());
  size_t at = 0;
  for (size_t hit; (hit = s->find(from, at)) != std::string::npos; at = hit + from.size()) {
    out.append(*s, at, hit - at);
    out.append(to);
  }
  out.append(*s, at);
  *s = std::move(out);
}

bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_';
}

// "<0xAB>" -> 0xAB, else -1 (HF's ByteFallback decoder accepts exactly this six-character form).
int byte_fallback_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void apply_decode_step(const DecodeStep& step, std::vector<std::string>* tokens) {
  switch (step.kind) {
    case DecodeStep::Kind::kReplace:
      for (std::string& t : *tokens) replace_all(&t, step.from, step.text);
      break;
    case DecodeStep::Kind::kByteFallback: {
      std::vector<std::string> out;
      std::string bytes;
      bool in_bytes = false;
      for (std::string& t : *tokens) {
        const int b = byte_fallback_value(t);
        if (b >= 0) {
          bytes += static_cast<char>(b);
          in_bytes = true;
          continue;
        }
        if (in_bytes) out.push_back(std::move(bytes));
        bytes.clear();
        in_bytes = false;
        out.push_back(std::move(t));
      }
      if (in_bytes) out.push_back(std::move(bytes));
      *tokens = std::move(out);
      break;
    }
    case DecodeStep::Kind::kFuse: {
      std::string all;
      for (const std::string& t : *tokens) all += t;
      tokens->assign(1, std::move(all));
      break;
    }
    case DecodeStep::Kind::kStrip:
      for (std::string& t : *tokens) {
        const std::string_view c = step.text;
        size_t b = 0, e = t.size();
        for (int i = 0; i < step.start && e - b >= c.size() && t.compare(b, c.size(), c) == 0; ++i) b += c.size();
        for (int i = 0; i < step.stop && e - b >= c.size() && t.compare(e - c.size(), c.size(), c) == 0; ++i) e -= c.size();
        t = t.substr(b, e - b);
      }
      break;
    case DecodeStep::Kind::kMetaspace:
      for (size_t i = 0; i < tokens->size(); ++i)
        replace_all(&(*tokens)[i], step.from, i == 0 && step.prepend ? "" : " ");
      break;
  }
}

std::string compute_fingerprint(const BpeTokenizerSpec& spec) {
  Sha256 h;
  h.update_field("lmt-tokenizer-v1");
  for (const TextStep& s : spec.text_steps) {
    h.update_field("text:" + std::to_string(static_cast<int>(s.kind)));
    h.update_field(s.text);
    h.update_field(s.from);
  }
  for (const SplitStep& s : spec.split_steps) {
    h.update_field("split:" + std::to_string(static_cast<int>(s.kind)));
    h.update_field(s.regex ? s.regex->pattern() : s.text);
  }
  const BpeOptions& o = spec.options;
  h.update_field("model:" + std::to_string(static_cast<int>(o.symbols)) + "," + std::to_string(o.byte_fallback) + "," +
                 std::to_string(o.unk_id.value_or(-1)) + "," + std::to_string(o.fuse_unk) + "," +
                 std::to_string(o.whole_piece_lookup));
  for (const auto& t : spec.model_tokens) h.update_field(t ? "+" + *t : "-");
  h.update_field("merges");
  for (const BpeMerge& g : spec.merges) {
    const int32_t v[4] = {g.left, g.right, g.rank, g.merged};
    h.update(v, sizeof(v));  // little-endian on every machine lmtrain runs on
  }
  for (const DecodeStep& s : spec.decode_steps) {
    h.update_field("decode:" + std::to_string(static_cast<int>(s.kind)) + "," + std::to_string(s.start) + "," +
                   std::to_string(s.stop) + "," + std::to_string(s.prepend));
    h.update_field(s.text);
    h.update_field(s.from);
  }
  for (const AddedToken& a : spec.added_tokens) {
    h.update_field("added:" + std::to_string(a.id) + "," + std::to_string(a.special) + std::to_string(a.lstrip) +
                   std::to_string(a.rstrip) + std::to_string(a.single_word));
    h.update_field(a.text);
  }
  return h.hex_digest();
}

}  // namespace

StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(BpeTokenizerSpec spec) {
  LMT_ASSIGN_OR_RETURN(BpeModel model, BpeModel::create(spec.model_tokens, spec.merges, spec.options, spec.source));
  for (const TextStep& s : spec.text_steps)
    LMT_CHECK(s.kind != TextStep::Kind::kReplace || !s.from.empty()) << "a Replace step needs a pattern";
  for (const SplitStep& s : spec.split_steps)
    LMT_CHECK(s.kind == SplitStep::Kind::kRegex ? s.regex.has_value() : !s.text.empty()) << "incomplete split step";
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(std::move(model)));
  t->fingerprint_ = compute_fingerprint(spec);
  t->description_ = spec.description;
  t->text_steps_ = std::move(spec.text_steps);
  t->split_steps_ = std::move(spec.split_steps);
  t->decode_steps_ = std::move(spec.decode_steps);
  t->id_text_ = std::move(spec.model_tokens);
  for (const AddedToken& a : spec.added_tokens) {
    if (a.text.empty() || a.id < 0)
      return InvalidArgument(spec.source + ": added token with id " + std::to_string(a.id) + " and content '" + a.text +
                             "' is not usable (empty content or negative id)");
    if (static_cast<size_t>(a.id) >= t->id_text_.size()) t->id_text_.resize(static_cast<size_t>(a.id) + 1);
    t->id_text_[a.id] = a.text;
    t->added_ids_.insert(a.text, a.id);
  }
  t->added_ = std::move(spec.added_tokens);
  std::stable_sort(t->added_.begin(), t->added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.text.size() > b.text.size(); });
  t->vocab_size_ = static_cast<int64_t>(t->id_text_.size());
  for (const std::string& name : spec.eos_candidates) {
    if (auto id = t->token_id(name)) {
      t->eos_id_ = id;
      break;
    }
  }
  return t;
}

std::string BpeTokenizer::normalize(std::string_view text) const {
  std::string s(text);
  for (const TextStep& step : text_steps_) {
    switch (step.kind) {
      case TextStep::Kind::kNfc:
        s = nfc_normalize(s);
        break;
      case TextStep::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.text);
        break;
      case TextStep::Kind::kPrependIfAbsent:
        if (!s.empty() && !std::string_view(s).starts_with(step.text)) s.insert(0, step.text);
        break;
      case TextStep::Kind::kReplace:
        replace_all(&s, step.from, step.text);
        break;
    }
  }
  return s;
}

void BpeTokenizer::split(std::string_view text, std::vector<std::string_view>* pieces) const {
  thread_local std::vector<std::string_view> scratch;
  pieces->clear();
  pieces->push_back(text);
  for (const SplitStep& step : split_steps_) {
    scratch.clear();
    for (std::string_view p : *pieces) {
      if (step.kind == SplitStep::Kind::kRegex) {
        step.regex->split(p, &scratch);
        continue;
      }
      size_t start = 0;  // kBeforeEach: cut in front of every occurrence except at 0
      for (size_t hit = p.find(step.text, 1); hit != std::string_view::npos; hit = p.find(step.text, hit + 1)) {
        scratch.push_back(p.substr(start, hit - start));
        start = hit;
      }
      if (start < p.size()) scratch.push_back(p.substr(start));
    }
    pieces->swap(scratch);
  }
}

void BpeTokenizer::encode_into(std::string_view text, std::vector<int32_t>* out) const {
  std::string normalized;
  if (!text_steps_.empty()) {
    normalized = normalize(text);
    text = normalized;
  }
  if (text.empty()) return;
  out->reserve(out->size() + text.size() / 4 + 1);
  thread_local std::vector<std::string_view> pieces;
  split(text, &pieces);
  for (std::string_view p : pieces) model_.encode_piece(p, out);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode_into(text, &out);
  return out;
}

std::vector<int32_t> BpeTokenizer::encode_with_special_tokens(std::string_view text) const {
  std::vector<int32_t> out;
  size_t segment = 0;  // start of the text not yet encoded
  for (size_t i = 0; i < text.size(); ++i) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : added_) {  // longest first
      if (text.compare(i, a.text.size(), a.text) != 0) continue;
      const size_t end = i + a.text.size();
      if (a.single_word && ((i > 0 && is_word_byte(text[i - 1])) || (end < text.size() && is_word_byte(text[end]))))
        continue;
      hit = &a;
      break;
    }
    if (hit == nullptr) continue;
    size_t before = i, after = i + hit->text.size();
    if (hit->lstrip)
      while (before > segment && is_ascii_space(text[before - 1])) --before;
    if (hit->rstrip)
      while (after < text.size() && is_ascii_space(text[after])) ++after;
    encode_into(text.substr(segment, before - segment), &out);
    out.push_back(hit->id);
    segment = after;
    i = after - 1;
  }
  encode_into(text.substr(segment), &out);
  return out;
}

std::vector<std::string> BpeTokenizer::pieces(std::string_view text) const {
  const std::string normalized = normalize(text);
  std::vector<std::string_view> views;
  split(normalized, &views);
  return {views.begin(), views.end()};
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  // Ids without a token (out of range, or holes such as tiktoken's unused special ids) decode to
  // nothing, as in Hugging Face `tokenizers`.
  auto text_of = [&](int32_t id) -> const std::string* {
    if (id < 0 || static_cast<size_t>(id) >= id_text_.size() || !id_text_[id]) return nullptr;
    return &*id_text_[id];
  };
  std::string out;
  if (decode_steps_.empty()) {
    for (int32_t id : ids)
      if (const std::string* t = text_of(id)) out += *t;
    return out;
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids)
    if (const std::string* t = text_of(id)) tokens.push_back(*t);
  for (const DecodeStep& step : decode_steps_) apply_decode_step(step, &tokens);
  for (const std::string& t : tokens) out += t;
  return out;
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  if (const int32_t id = added_ids_.find(token); id >= 0) return id;
  if (const int32_t id = model_.token_id(token); id >= 0) return id;
  return std::nullopt;
}

}  // namespace lmt::data

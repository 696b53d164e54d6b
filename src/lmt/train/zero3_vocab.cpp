// Zero3's streamed ends (zero3.h, "streamed"): the model's StreamedVocab.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "lmt/base/check.h"
#include "lmt/base/timer.h"
#include "lmt/base/trace.h"
#include "lmt/train/zero3.h"

namespace lmt::train {

// The LM head's chunks become units L … L+K-1; the other ends a compact buffer with views into it.
void Zero3::plan_streamed(const model::ParamLayout& layout, int64_t vocab_rows, int64_t max_block) {
  C_ = layout.config().d_model;
  V_ = layout.config().vocab_size;
  const model::ParamInfo *embed = nullptr, *head = nullptr;
  for (const auto& p : layout.params()) {
    if (p.role == model::ParamRole::kEmbedding) embed = &p;
    if (p.role == model::ParamRole::kLmHead) head = &p;
  }
  LMT_CHECK(embed != nullptr) << "ZeRO-3: a layout without a token embedding";
  if (head == nullptr) head = embed;  // tied
  embed_at_ = embed->offset;
  chunk_rows_ = std::min(V_, vocab_rows > 0 ? vocab_rows : std::max<int64_t>(1, max_block / C_));
  for (int64_t v0 = 0; v0 < V_; v0 += chunk_rows_)
    units_.push_back(range(head->offset + v0 * C_, head->offset + std::min(V_, v0 + chunk_rows_) * C_));

  std::vector<Compact::Part> parts;
  for (const auto& p : layout.params())
    if (p.layer < 0 && &p != embed && &p != head) parts.push_back({p.offset, p.numel, 0});
  small_.plan(std::move(parts), cuts_);
  small_p_ = Tensor({std::max<int64_t>(small_.n, 1)}, DType::kF32);
  small_g_ = Tensor({std::max<int64_t>(small_.n, 1)}, DType::kF32);
  float* base = small_p_.as<float>();  // views at base + flat offset, remapped into the compact buffers
  const model::ModelViews v = layout.views(base, DType::kF32);
  auto in = [&](const TensorView& x, const Tensor& buf) {
    return x.present() ? small_.remap(x, base, buf.as<float>()) : TensorView();
  };
  for (auto [to, buf] : {std::pair{&ew_, &small_p_}, std::pair{&eg_, &small_g_}}) {
    to->pos_embed = in(v.pos_embed, *buf);
    to->final_norm_w = in(v.final_norm_w, *buf);
    to->final_norm_b = in(v.final_norm_b, *buf);
  }
  ec_ = ew_;  // the embedding and the LM head stay absent: the model reads them through this class
}

void Zero3::exchange_ids(const TensorView& ids) {
  const int W = comm_.world();
  const int64_t N = ids.numel();
  if (!ids_.view().present() || ids_.numel() != W * N) ids_ = Tensor({W * N}, DType::kI32);
  int32_t* all = ids_.as<int32_t>();
  std::memcpy(all + comm_.rank() * N, ids.data(), static_cast<size_t>(N) * sizeof(int32_t));
  keep(comm_.all_gather_async(reinterpret_cast<uint16_t*>(all), std::vector<int64_t>(W, 2 * N))->wait());
}

void Zero3::embed(const TensorView& out, const TensorView& ids) {
  LMT_TRACE_SCOPE("zero3_embed");
  Timer t;
  exchange_ids(ids);
  const int W = comm_.world(), r = comm_.rank();
  const int64_t N = ids.numel(), C = C_, X = std::max<int64_t>(1, gslot_.numel() / (W * C));  // rows per round
  const int32_t* all = ids_.as<int32_t>();
  float* send = gslot_.as<float>();  // [W][n][C]: the rows of rank k's tokens that this rank owns
  std::vector<int64_t> counts(static_cast<size_t>(W));
  for (int64_t r0 = 0; r0 < N; r0 += X) {
    const int64_t n = std::min(X, N - r0);
    std::fill(counts.begin(), counts.end(), n * C);
    std::fill_n(send, W * n * C, -0.0f);  // x + -0 == x for every x, +0 and -0 included
    for (int k = 0; k < W; ++k)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t id = all[k * N + r0 + j];
        if (id < 0 || id >= V_) {
          keep(InvalidArgument("token id " + std::to_string(id) + " at position " + std::to_string(r0 + j) + " of rank " +
                                   std::to_string(k) + "'s micro-batch is outside the vocabulary [0, " + std::to_string(V_) + ")",
                               "the data must be tokenized for this model's vocabulary"));
          continue;
        }
        const int64_t row = embed_at_ + id * C;
        const int64_t a = std::max(row, cuts_[r]), b = std::min(row + C, cuts_[r + 1]);
        if (a < b)
          std::memcpy(send + (k * n + j) * C + (a - row), shard_at(pshard_.as<float>(), a), static_cast<size_t>(b - a) * 4);
      }
    keep(comm_.reduce_scatter_sum(send, out.as<float>() + r0 * C, counts));
  }
  comm_seconds_ += t.seconds();
}

void Zero3::embed_backward(const TensorView& dout, const TensorView& ids) {
  LMT_TRACE_SCOPE("zero3_embed_backward");
  Timer t;
  const int W = comm_.world(), r = comm_.rank();
  const int64_t N = ids.numel(), C = C_, X = std::max<int64_t>(1, gslot_.numel() / (W * C));
  LMT_CHECK(ids_.view().present() && ids_.numel() == W * N) << "ZeRO-3: embed_backward() without its forward's embed()";
  const int32_t* all = ids_.as<int32_t>();
  float* buf = gslot_.as<float>();  // [W][n][C]: every rank's rows of d out
  float* g = gshard_.as<float>();
  std::vector<int64_t> counts(static_cast<size_t>(W));
  for (int64_t r0 = 0; r0 < N; r0 += X) {
    const int64_t n = std::min(X, N - r0);
    std::fill(counts.begin(), counts.end(), n * C);
    std::memcpy(buf + r * n * C, dout.as<float>() + r0 * C, static_cast<size_t>(n * C) * 4);
    keep(comm_.all_gather(buf, counts));
    for (int k = 0; k < W; ++k)  // rank by rank, each in token order (one process: ZeRO 0's order)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t id = all[k * N + r0 + j];
        if (id < 0 || id >= V_) continue;  // reported by embed()
        const int64_t row = embed_at_ + id * C;
        const int64_t a = std::max(row, cuts_[r]), b = std::min(row + C, cuts_[r + 1]);
        const float* from = buf + (k * n + j) * C + (a - row);
        float* to = a < b ? shard_at(g, a) : nullptr;
        for (int64_t i = 0; i < b - a; ++i) to[i] += from[i];
      }
  }
  comm_seconds_ += t.seconds();
}

TensorView Zero3::head_rows(int64_t chunk, int64_t next) {
  const int64_t u = L_ + chunk;
  use_unit(u);
  if (next >= 0) prefetch(L_ + next);
  const Range& r = units_[u];
  return TensorView(slot_data(static_cast<int>(u % 2)), Shape{(r.end - r.begin) / C_, C_}, bf16_ ? DType::kBF16 : DType::kF32);
}

TensorView Zero3::head_grad(int64_t chunk) {
  const Range& r = units_[L_ + chunk];
  const TensorView g(gslot_.as<float>(), Shape{(r.end - r.begin) / C_, C_}, DType::kF32);
  m_.backend().fill(g, 0.0);
  return g;
}

void Zero3::head_grad_ready(int64_t chunk) {
  reduce_unit(L_ + chunk);
  if (chunk == 0) prefetch(L_ - 1);  // the head's last chunk (model/streamed_head.h): backward starts with the last block
}

}  // namespace lmt::train

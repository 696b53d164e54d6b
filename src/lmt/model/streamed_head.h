// The LM head fused with softmax cross-entropy over a StreamedVocab (model/streamed_vocab.h): the
// head's weight arrives in K = ⌈V / R⌉ chunks of R rows and its gradient leaves the same way, so no
// [V, C] buffer is ever needed.
//
// Pass 1 runs Backend::lm_head_cross_entropy on chunks 0 … K−1 as a vocabulary-parallel part
// (CrossEntropyOptions::vocab_begin and combine): combine folds each chunk's log-sum-exp and target
// logit per row into running ones, and on the last chunk hands back the whole vocabulary's, so that
// call writes the final losses and (training) the last chunk's gradients. Training then runs chunks
// K−2 … 0 again with those final statistics for theirs: dx summed over the chunks, each chunk's
// weight gradient handed back as soon as it is complete. The price is the logits of K−1 chunks
// computed twice: (K−1)/K · 2·N·V·C more FLOPs than the one-pass head (docs/DIST.md).
//
// Results equal the one-pass head up to the rounding of combining the chunks' log-sum-exps (in f64).
#pragma once

#include <cstdint>
#include <vector>

#include "lmt/kernels/backend.h"
#include "lmt/model/streamed_vocab.h"
#include "lmt/tensor/tensor.h"

namespace lmt::model {

struct StreamedHeadScratch {  // sized on first use, then reused (N rows of C)
  std::vector<double> lse;
  std::vector<float> target_logit;
  Tensor dx;                  // f32 [N, C]: a later chunk's part of dx
};

// losses f32 [N] (written), x [N, C] (compute dtype), targets i32 [N] in [0, vocab_size) or
// ignore_index; opts as for Backend::lm_head_cross_entropy (vocab_size, vocab_begin and combine are
// set here). dx f32 [N, C] (overwritten) present: a training pass (gradients of grad_scale · Σ
// losses, the weight's through vocab.head_grad / head_grad_ready).
void streamed_lm_head_loss(kernels::Backend& b, StreamedVocab& vocab, int64_t vocab_size, const TensorView& losses,
                           const TensorView& x, const TensorView& targets, kernels::CrossEntropyOptions opts,
                           const TensorView& dx, StreamedHeadScratch& s);

}  // namespace lmt::model

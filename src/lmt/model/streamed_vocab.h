// StreamedVocab: the token embedding and the LM head read in pieces from whoever holds them, so that
// no process keeps either whole, nor its f32 gradient (ZeRO-3 over several ranks, train/zero3.h:
// for GPT-2's 50,304 × 768 tied embedding that is a 154 MB f32 gradient and a 77 MB bf16 copy per
// rank, more than the rest of the gathered state together).
//
// When a Transformer has one (set_streamed_vocab), its passes call, in this order:
//   embed(out, ids)           forward, first: out[n, :] = E[ids[n], :] (f32 [N, C], overwritten; E the
//                             token embedding's f32 master rows, the values ZeRO 0's lookup reads).
//   head_rows(k, next)        the LM head's rows [k·R, min((k+1)·R, V)) in the compute dtype, [rows, C]
//                             (R = head_chunk_rows(), V the real vocabulary), valid until the next
//                             head_rows() call; `next` is the chunk the head wants after it (-1: none),
//                             which the holder may start fetching now.
//   head_grad(k)              training: f32 [rows, C] zeros that the head adds chunk k's weight
//                             gradient into; head_grad_ready(k) hands it back before the next
//                             head_rows() call (a tied head's gradient is the embedding's).
//   embed_backward(dout, ids) backward, last: dE[ids[n], :] += dout[n, :] (f32 [N, C]); ids are the
//                             forward's.
// Every call is collective over the holder's processes, in the same order on each (the model's passes
// are). Host backends only. model/streamed_head.h runs the LM head and its loss over the chunks.
#pragma once

#include <cstdint>

#include "lmt/tensor/tensor.h"

namespace lmt::model {

class StreamedVocab {
 public:
  virtual ~StreamedVocab() = default;
  virtual int64_t head_chunk_rows() const = 0;  // R >= 1
  virtual void embed(const TensorView& out, const TensorView& ids) = 0;
  virtual TensorView head_rows(int64_t chunk, int64_t next) = 0;
  virtual TensorView head_grad(int64_t chunk) = 0;
  virtual void head_grad_ready(int64_t chunk) = 0;
  virtual void embed_backward(const TensorView& dout, const TensorView& ids) = 0;
};

}  // namespace lmt::model

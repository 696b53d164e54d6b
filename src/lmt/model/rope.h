// RoPE frequencies of a ModelConfig, with Hugging Face's RoPE scaling types (transformers 5.24,
// modeling_rope_utils.py ROPE_INIT_FUNCTIONS; same formulas, computed here in f64 where HF uses f32).
//
// With d = rotary_dim, θ = rope_theta and the default inv_freq[i] = θ^(-2i/d), i < d/2:
//   none     the default.
//   linear   inv_freq[i] / factor (positions interpolated by factor).
//   dynamic  NTK-aware: with L = max(seq_len, orig), θ' = θ·(factor·L/orig - (factor - 1))^(d/(d-2))
//            and inv_freq[i] = θ'^(-2i/d); orig = original_max_position_embeddings, which for this
//            type is what HF calls max_position_embeddings (HF's dynamic ignores the rope dict's
//            own original_max_position_embeddings). Up to orig it is the default.
//   yarn     blends interpolation (inv_freq/factor) and extrapolation (inv_freq) with a linear ramp
//            over the dimensions between the correction dims of beta_fast and beta_slow rotations in
//            orig positions; cos and sin are multiplied by attention_factor (0: derived, as HF:
//            mscale and mscale_all_dim both set: get_mscale(factor, mscale) / get_mscale(factor,
//            mscale_all_dim), else 0.1·ln(factor) + 1).
//   llama3   wavelengths 2π/inv_freq above orig/low_freq_factor are divided by factor, those below
//            orig/high_freq_factor kept, those between smoothly interpolated.
//
// seq_len: the length the frequencies are for, max(position) + 1 over the rows of one forward call
// (HF's rule: dynamic_rope_update reads torch.max(position_ids) + 1). Only dynamic depends on it:
//   training and full-sequence eval: one forward call over B·T rows, so the whole batch uses the
//             frequencies of its largest position (T with positions 0..T-1), as HF's forward does.
//   KV-cache decode: each decode call uses the frequencies of its own last position + 1, while the
//             cached keys keep the rotation they were written with; this is exactly what HF's
//             generate() computes with dynamic scaling (and why its incremental logits differ from
//             its full forward past orig). HF additionally remembers the longest length seen and keeps
//             its frequencies until a call shorter than orig arrives; lmtrain is stateless (a call's
//             frequencies depend only on its positions), which equals HF for a fresh model and
//             growing lengths (generation).
#pragma once

#include <cstdint>
#include <string_view>

#include "lmt/base/status.h"
#include "lmt/kernels/backend.h"
#include "lmt/model/config.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt::model {

// "none" (also HF's "default"), "linear", "dynamic", "yarn", "llama3"; anything else is an error
// naming the type and listing the supported ones (e.g. "longrope" is refused).
StatusOr<RopeScalingType> rope_scaling_type_from_name(std::string_view name);

// The checks of c.rope_scaling (called by ModelConfig::validate()): each message names the
// rope_scaling key and value; the hint gives a valid example.
Status validate_rope_scaling(const ModelConfig& c);

// The frequencies of c (positions = rope) for a forward call whose largest position is seq_len - 1.
kernels::RopeFreqs rope_frequencies(const ModelConfig& c, int64_t seq_len);

// max(positions) + 1 over positions[N] (i32, host memory); 1 if N == 0.
int64_t rope_seq_len(const TensorView& positions);

}  // namespace lmt::model

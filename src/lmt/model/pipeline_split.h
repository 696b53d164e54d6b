// Pipeline parallelism at the model level: which layers each of P stages holds, the model of one
// stage, and how its parameters map to the whole model's.
//
// Stage s holds blocks [cuts[s], cuts[s+1]) (balanced by FLOPs, counting the LM head on the last
// stage: pipeline_cuts) and every stage holds
// the ends: the token and position embeddings, the final norm and the LM head. Only the first
// stage computes with the embeddings and only the last with the final norm and the head; their
// gradients are summed over the stages (so a tied embedding gets both uses' gradients) and every
// stage applies the same update, so the ends stay identical everywhere. A stage's model is the
// whole config with n_layers = its block count; its ParamLayout is the stage's flat buffer.
//
// MoE models: a stage's config carries moe.first_layer = its first block's whole-model index, so
// its MoE layers are the whole model's (moe.every > 1 included) wherever the cuts fall.
// Not split here (refused by pipeline_supported, naming the feature): nope_every, which chooses
// layers by their index and has no such offset.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/model/config.h"
#include "lmt/model/params.h"

namespace lmt::model {

// Ok when `full`'s blocks can be split into `stages` stages: InvalidArgument for stages < 1 or >
// n_layers; Unimplemented for nope_every when stages > 1.
Status pipeline_supported(const ModelConfig& full, int stages);

// stages + 1 cut points: stage s holds blocks [cuts[s], cuts[s + 1]), each at least one. Balanced
// by training FLOPs at seq_len (model/flops.h): a block costs its matmuls, the last stage also the
// LM head's (2·C·V per token forward; the embedding lookups cost nothing); the last stage gets the
// block count that minimises the largest stage, the others share the rest evenly (the first ones
// one more). With seq_len 0, blocks alone are balanced (n_layers / stages each).
std::vector<int64_t> pipeline_cuts(const ModelConfig& c, int stages, int64_t seq_len);

// Copies between the whole model's flat f32 buffers (ParamLayout(full)) and each stage's.
class PipelineMap {
 public:
  // `full` valid and pipeline_supported (checked); cuts as pipeline_cuts(full, stages, seq_len), or
  // given: `layers` blocks per stage (stages of them, each >= 1, summing to n_layers; checked).
  PipelineMap(const ModelConfig& full, int stages, int64_t seq_len, const std::vector<int64_t>& layers = {});

  int stages() const { return static_cast<int>(stage_layouts_.size()); }
  const std::vector<int64_t>& cuts() const { return cuts_; }
  const ParamLayout& full_layout() const { return full_; }
  const ParamLayout& stage_layout(int s) const { return stage_layouts_[static_cast<size_t>(s)]; }
  // Elements of each stage's flat buffer.
  std::vector<int64_t> stage_numels() const;

  // stage[stage numel] = stage s's part of full (gaps zeroed).
  void take_stage(int s, const float* full, float* stage) const;
  // Writes stage s's blocks into `full`, and the ends too when `ends` is true.
  void put_stage(int s, const float* stage, float* full, bool ends) const;
  // The whole model from every stage's buffer laid end to end (as an all-gather with counts
  // stage_numels() leaves them); the ends from stage 0's.
  void assemble(const float* stages, float* full) const;
  // [begin, end) ranges of stage s's buffer that hold the ends (sorted).
  std::vector<std::pair<int64_t, int64_t>> end_ranges(int s) const { return ends_of(stage_layout(s)); }
  // The same for any layout (e.g. a stage's with its experts sharded).
  static std::vector<std::pair<int64_t, int64_t>> ends_of(const ParamLayout& layout);

 private:
  // Per layer (index: layer + 1, so the ends are [0]): the params of `layout` in layout order.
  static std::vector<std::vector<const ParamInfo*>> by_layer(const ParamLayout& layout);
  void copy(int s, float* full, float* stage, bool to_full, bool ends) const;

  ParamLayout full_;
  std::vector<int64_t> cuts_;
  std::vector<ParamLayout> stage_layouts_;
};

}  // namespace lmt::model

// `lmtrain plan --emit-config`: the fragment parses as a recipe through the config loader (every key
// in the schema, in range) with the plan's layout, overlays a base recipe key by key, and is never
// written over an existing file.
#include "lmt/plan/emit_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lmt/config/config.h"

namespace lmt::plan {
namespace {
namespace fs = std::filesystem;

PlanReport cpu_plan(int zero, bool recompute) {
  PlanInputs in;
  in.model = *model::preset("gpt2-124m");
  in.hardware = "cpu";
  in.devices = 4;
  in.seq_len = 256;
  in.micro_batch = 2;
  in.global_batch = 32;
  in.zero_stage = zero;
  in.recompute = recompute;
  in.tp = 2;
  in.pp = 1;
  auto r = make_plan(in);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

TEST(EmitConfig, FragmentLoadsWithThePlansValues) {
  const PlanReport r = cpu_plan(1, true);
  ASSERT_EQ(r.layout.tp, 2);
  ASSERT_EQ(r.layout.dp, 2);
  auto c = config::Config::from_toml_string(layout_fragment(r), "layout.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << layout_fragment(r);
  EXPECT_EQ(c->get_int("parallel.dp"), 2);
  EXPECT_EQ(c->get_int("parallel.tp"), 2);
  EXPECT_EQ(c->get_int("parallel.pp"), 1);
  EXPECT_FALSE(c->get_bool("parallel.sp"));
  EXPECT_EQ(c->get_int("parallel.ep"), 1);
  EXPECT_EQ(c->get_int("train.zero"), 1);
  EXPECT_EQ(c->get_int("train.micro_batch"), 2);
  EXPECT_EQ(c->get_int("train.grad_accum"), 8);  // 32 / (2 · 2)
  EXPECT_EQ(c->get_int("train.seq_len"), 256);
  EXPECT_TRUE(c->get_bool("train.recompute"));
  // The global batch survives: micro_batch · grad_accum · dp.
  EXPECT_EQ(c->get_int("train.micro_batch") * c->get_int("train.grad_accum") * c->get_int("parallel.dp"),
            r.inputs.global_batch);
}

// An MoE plan with --ep writes parallel.ep (a key the recipe schema accepts, in range).
TEST(EmitConfig, ExpertParallelismIsWritten) {
  PlanInputs in;
  in.model = *model::preset("tiny-moe");
  in.hardware = "cpu";
  in.devices = 4;
  in.seq_len = 64;
  in.micro_batch = 2;
  in.global_batch = 16;
  in.tp = 1;
  in.pp = 1;
  in.ep = 2;
  auto r = make_plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto c = config::Config::from_toml_string(layout_fragment(*r), "layout.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << layout_fragment(*r);
  EXPECT_EQ(c->get_int("parallel.ep"), 2);
  EXPECT_EQ(c->get_int("parallel.dp"), 4);
}

TEST(EmitConfig, OverlaysABaseRecipe) {
  auto base = config::Config::from_toml_string(
      "[data]\npath = \"d\"\n[train]\nmicro_batch = 8\nmax_steps = 7\n[optim]\nlr = 0.001\n", "base.toml");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  auto frag = config::Config::from_toml_string(layout_fragment(cpu_plan(0, false)), "layout.toml");
  ASSERT_TRUE(frag.ok());
  base->overlay(*frag);
  EXPECT_EQ(base->get_int("train.micro_batch"), 2);  // the fragment wins where it sets a key
  EXPECT_EQ(base->where("train.micro_batch"), "layout.toml");
  EXPECT_EQ(base->get_int("train.max_steps"), 7);  // the base keeps the rest
  EXPECT_EQ(base->get_float("optim.lr"), 0.001);
  EXPECT_EQ(base->get_string("data.path"), "d");
  EXPECT_EQ(base->get_int("parallel.tp"), 2);
}

TEST(EmitConfig, WritesAFileAndNeverOverwrites) {
  const fs::path dir = fs::temp_directory_path() / ("lmt_emit_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "layout.toml").string();
  const PlanReport r = cpu_plan(0, false);
  ASSERT_TRUE(emit_layout_config(r, path).ok());
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), layout_fragment(r));
  {
    std::ofstream g(path);
    g << "mine\n";
  }
  Status s = emit_layout_config(r, path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("already exists"), std::string::npos) << s.ToString();
  std::ifstream h(path);
  std::string kept;
  std::getline(h, kept);
  EXPECT_EQ(kept, "mine");  // untouched
  EXPECT_FALSE(emit_layout_config(r, (dir / "no" / "such" / "dir.toml").string()).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmt::plan

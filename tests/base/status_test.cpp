#include "lmt/base/status.h"

#include <gtest/gtest.h>

namespace lmt {
namespace {

Status FailsWith(StatusCode code) { return Status(code, "config.toml: key 'optim.lr' is negative", "use a positive value"); }

StatusOr<int> Parse(bool ok) {
  if (!ok) return InvalidArgument("bad value", "try 3");
  return 3;
}

Status UsesReturnIfError(bool ok, int* out) {
  LMT_ASSIGN_OR_RETURN(int v, Parse(ok));
  *out = v;
  LMT_RETURN_IF_ERROR(ok ? Status::Ok() : Internal("unreachable"));
  return Status::Ok();
}

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "ok");
}

TEST(Status, ToStringPutsHintOnItsOwnLine) {
  Status s = FailsWith(StatusCode::kInvalidArgument);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "error: config.toml: key 'optim.lr' is negative\nhint: use a positive value");
}

TEST(Status, WithContextPrependsAndKeepsHint) {
  Status s = NotFound("shard_0003.bin").WithContext("loading dataset data/");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "loading dataset data/: shard_0003.bin");
  EXPECT_EQ(Status::Ok().WithContext("x").ok(), true);
}

TEST(StatusOr, MacrosPropagateErrorsAndValues) {
  int v = 0;
  EXPECT_TRUE(UsesReturnIfError(true, &v).ok());
  EXPECT_EQ(v, 3);
  Status s = UsesReturnIfError(false, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.hint(), "try 3");
}

TEST(StatusOrDeathTest, ValueOfErrorStopsWithTheError) {
  StatusOr<int> bad = Parse(false);
  EXPECT_DEATH((void)bad.value(), "value\\(\\) of a failed StatusOr: error: bad value");
}

}  // namespace
}  // namespace lmt

// AtomicDirectory (io/atomic_dir.h) and the file helpers under it (io/files.h): a committed directory
// appears whole, an abandoned or failing writer leaves nothing behind, an existing directory with
// contents is never overwritten.
#include "lmt/io/atomic_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "lmt/io/atomic_file.h"
#include "lmt/io/files.h"

namespace lmt::io {
namespace {
namespace fs = std::filesystem;
using Staging = AtomicDirectory::Staging;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class AtomicDirectoryTest : public ::testing::TestWithParam<Staging> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("lmt_atomic_dir_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(static_cast<int>(GetParam())) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes two files into a fresh AtomicDirectory for `target` and returns it uncommitted.
  AtomicDirectory staged(const fs::path& target) {
    const bool existed = fs::exists(target);
    auto d = AtomicDirectory::create(target.string(), GetParam());
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_TRUE(fs::is_directory(d->tmp_path()));
    if (!existed) {
      EXPECT_FALSE(fs::exists(target)) << "nothing appears before commit()";
    }
    EXPECT_TRUE(write_file_atomically(d->tmp_path() + "/a.txt", "alpha").ok());
    EXPECT_TRUE(write_file_atomically(d->tmp_path() + "/b.bin", std::string("\0\1\2", 3)).ok());
    return std::move(*d);
  }

  fs::path root_;
};

TEST_P(AtomicDirectoryTest, ACommittedDirectoryHoldsItsFilesAndNoStagingIsLeft) {
  const fs::path target = root_ / "out";
  {
    AtomicDirectory d = staged(target);
    if (GetParam() == Staging::kSuffix) {
      EXPECT_EQ(d.tmp_path(), target.string() + ".tmp");
    } else {
      EXPECT_EQ(fs::path(d.tmp_path()).filename().string().rfind(".out.tmp-", 0), 0u) << d.tmp_path();
    }
    ASSERT_TRUE(d.commit().ok());
    EXPECT_TRUE(d.committed());
  }  // the destructor of a committed directory removes nothing
  EXPECT_EQ(names_in(root_), (std::vector<std::string>{"out"}));
  EXPECT_EQ(names_in(target), (std::vector<std::string>{"a.txt", "b.bin"}));
  EXPECT_EQ(read(target / "a.txt"), "alpha");
  EXPECT_EQ(read(target / "b.bin"), std::string("\0\1\2", 3));
  if (GetParam() == Staging::kHidden) {  // mkdtemp's 0700 is widened: readable like any output
    struct stat st {};
    ASSERT_EQ(::stat(target.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0755u);
  }
}

TEST_P(AtomicDirectoryTest, AWriterThatFailsBeforeCommitLeavesNeitherTheDirectoryNorItsStaging) {
  const fs::path target = root_ / "out";
  auto failing_writer = [&]() -> Status {
    LMT_ASSIGN_OR_RETURN(AtomicDirectory d, AtomicDirectory::create(target.string(), GetParam()));
    LMT_RETURN_IF_ERROR(write_file_atomically(d.tmp_path() + "/a.txt", "alpha"));
    LMT_RETURN_IF_ERROR(write_file_atomically(d.tmp_path() + "/missing/b.txt", "beta"));  // fails: no such dir
    return d.commit();
  };
  Status s = failing_writer();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_TRUE(names_in(root_).empty()) << "left behind: " << names_in(root_).size() << " entries";
}

TEST_P(AtomicDirectoryTest, AnExistingDirectoryWithContentsIsNeverOverwritten) {
  const fs::path target = root_ / "out";
  fs::create_directories(target);
  std::ofstream(target / "old.txt") << "previous";
  {
    AtomicDirectory d = staged(target);
    Status s = d.commit();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kIoError);
    EXPECT_NE(s.message().find(target.string()), std::string::npos) << s.message();
    EXPECT_NE(s.hint().find("never overwritten"), std::string::npos) << s.hint();
    EXPECT_FALSE(d.committed());
  }
  EXPECT_EQ(names_in(root_), (std::vector<std::string>{"out"})) << "the staging directory is removed";
  EXPECT_EQ(names_in(target), (std::vector<std::string>{"old.txt"}));
  EXPECT_EQ(read(target / "old.txt"), "previous");
}

TEST_P(AtomicDirectoryTest, AnEmptyExistingDirectoryIsReplaced) {
  const fs::path target = root_ / "out";
  fs::create_directories(target);
  AtomicDirectory d = staged(target / "");  // a trailing '/' names the same directory
  EXPECT_EQ(d.path(), target.string());
  ASSERT_TRUE(d.commit().ok());
  EXPECT_EQ(names_in(target), (std::vector<std::string>{"a.txt", "b.bin"}));
}

TEST_P(AtomicDirectoryTest, TheParentIsCreatedAndAMovedFromWriterCleansNothing) {
  const fs::path target = root_ / "a" / "b" / "out";
  std::optional<AtomicDirectory> moved;
  {
    auto d = AtomicDirectory::create(target.string(), GetParam());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    moved.emplace(std::move(*d));
  }  // the moved-from object dies here: it must not remove the staging directory
  ASSERT_TRUE(fs::exists(moved->tmp_path()));
  ASSERT_TRUE(write_file_atomically(moved->tmp_path() + "/a.txt", "alpha").ok());
  ASSERT_TRUE(moved->commit().ok());
  EXPECT_EQ(read(target / "a.txt"), "alpha");
  EXPECT_EQ(names_in(root_ / "a" / "b"), (std::vector<std::string>{"out"}));
}

TEST_P(AtomicDirectoryTest, PathsThatNameNoNewDirectoryAreRefused) {
  for (const char* p : {"", ".", "./", "..", "../..", "/"}) {
    auto d = AtomicDirectory::create(p, GetParam());
    ASSERT_FALSE(d.ok()) << "'" << p << "'";
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Staging, AtomicDirectoryTest, ::testing::Values(Staging::kSuffix, Staging::kHidden),
                         [](const auto& info) { return info.param == Staging::kSuffix ? "Suffix" : "Hidden"; });

TEST(AtomicDirectorySuffixTest, AStaleStagingDirectoryFromACrashIsReplaced) {
  const fs::path root = fs::temp_directory_path() / ("lmt_atomic_dir_stale_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "out.tmp");
  std::ofstream(root / "out.tmp" / "half_written.bin") << "garbage";
  auto d = AtomicDirectory::create((root / "out").string(), Staging::kSuffix);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(names_in(d->tmp_path()).empty()) << "the crash's leftovers are gone";
  ASSERT_TRUE(write_file_atomically(d->tmp_path() + "/a.txt", "alpha").ok());
  ASSERT_TRUE(d->commit().ok());
  EXPECT_EQ(names_in(root / "out"), (std::vector<std::string>{"a.txt"}));
  EXPECT_FALSE(fs::exists(root / "out.tmp"));
  fs::remove_all(root);
}

TEST(FilesTest, HelpersReportErrorsNamingThePath) {
  EXPECT_EQ(errno_text(ENOENT), "No such file or directory");
  errno = EACCES;
  EXPECT_EQ(errno_text(), "Permission denied");
  EXPECT_EQ(parent_directory("file.txt"), ".");
  EXPECT_EQ(parent_directory("a/b/file.txt"), "a/b");
  EXPECT_TRUE(fsync_directory(fs::temp_directory_path().string()).ok());
  Status s = fsync_directory("/nonexistent/lmt_dir");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("/nonexistent/lmt_dir"), std::string::npos) << s.message();
}

TEST(FilesTest, WriteAllWritesEveryByteOrReturnsTheErrno) {
  const fs::path p = fs::temp_directory_path() / ("lmt_write_all_" + std::to_string(::getpid()));
  std::string bytes(3 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + 7);
  FILE* f = std::fopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(write_all(::fileno(f), bytes.data(), bytes.size()), 0);
  std::fclose(f);
  EXPECT_EQ(read(p), bytes);
  fs::remove(p);
  EXPECT_EQ(write_all(-1, bytes.data(), 1), EBADF);
}

}  // namespace
}  // namespace lmt::io

#include "commkit/common/file_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include <gtest/gtest.h>

namespace commkit {
namespace {

namespace fs = std::filesystem;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("commkit-file-io-test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(*dir));
  }
  fs::path Write(const std::string& name, const std::string& data) {
    fs::path p = dir_->path() / name;
    std::ofstream(p, std::ios::binary) << data;
    return p;
  }
  std::optional<TempDir> dir_;
};

TEST_F(FileIoTest, ReadsRegularFile) {
  auto data = ReadRegularFile(Write("a.log", "hello\n"), 1024, "log file");
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(*data, "hello\n");
}

TEST_F(FileIoTest, OversizeIsAnErrorOrTruncated) {
  fs::path p = Write("big.log", std::string(5000, 'x'));
  auto err = ReadRegularFile(p, 4096, "log file");
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(err.status().message().find("more than"), std::string::npos) << err.status().ToString();
  auto head = ReadRegularFile(p, 4096, "log file", Oversize::kTruncate);
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->size(), 4096u);
}

TEST_F(FileIoTest, RefusesDirectoryFifoAndDevice) {
  auto d = ReadRegularFile(dir_->path(), 1024, "log file");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("directory"), std::string::npos) << d.status().ToString();

  fs::path fifo = dir_->path() / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto start = std::chrono::steady_clock::now();
  auto f = ReadRegularFile(fifo, 1024, "topology file");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));  // no writer: must not block
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("FIFO"), std::string::npos) << f.status().ToString();

  auto z = ReadRegularFile("/dev/zero", 1024, "log file");
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("character device"), std::string::npos) << z.status().ToString();
}

TEST_F(FileIoTest, SymlinkLoopAndMissing) {
  fs::path a = dir_->path() / "a", b = dir_->path() / "b";
  fs::create_symlink(b, a);
  fs::create_symlink(a, b);
  auto loop = ReadRegularFile(a, 1024, "topology file");
  ASSERT_FALSE(loop.ok());
  EXPECT_NE(loop.status().message().find("loop"), std::string::npos) << loop.status().ToString();
  auto missing = ReadRegularFile(dir_->path() / "nope", 1024, "log file");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(TempDirTest, PrivateAndRemovedOnDestruction) {
  fs::path where;
  {
    auto dir = TempDir::Create("commkit-tempdir-test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    where = dir->path();
    struct stat st {};
    ASSERT_EQ(::stat(where.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    std::ofstream(where / "f") << "x";
    TempDir moved = std::move(*dir);  // the moved-from one must not remove it
    EXPECT_TRUE(fs::exists(where / "f"));
  }
  EXPECT_FALSE(fs::exists(where));
}

}  // namespace
}  // namespace commkit

#include "commkit/common/dynamic_library.h"

#include <gtest/gtest.h>

namespace commkit {
namespace {

TEST(DynamicLibrary, LoadsLibcAndResolvesTypedSymbols) {
  auto lib = DynamicLibrary::Open({"libdoes-not-exist.so.9", "libc.so.6"});
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_EQ(lib->name(), "libc.so.6");
  EXPECT_NE(lib->path().find("libc.so.6"), std::string::npos);
  auto strlen_fn = lib->Function<size_t(const char*)>("strlen");
  ASSERT_TRUE(strlen_fn.ok());
  EXPECT_EQ((*strlen_fn)("commkit"), 7u);
  auto missing = lib->Symbol("commkit_no_such_symbol");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(DynamicLibrary, MissingLibraryIsUnavailableAndListsEveryName) {
  auto lib = DynamicLibrary::Open({"libnvidia-ml-fake.so.1", "libnvidia-ml-fake.so"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("libnvidia-ml-fake.so.1 or libnvidia-ml-fake.so"), std::string::npos)
      << lib.status().message();
}

TEST(DynamicLibrary, MoveKeepsHandle) {
  auto lib = DynamicLibrary::Open({"libc.so.6"});
  ASSERT_TRUE(lib.ok());
  DynamicLibrary moved = std::move(lib).value();
  EXPECT_TRUE(moved.Symbol("malloc").ok());
}

TEST(DynamicLibrary, OpenOneGivesTheLoaderErrorAlone) {
  auto lib = DynamicLibrary::OpenOne("/nonexistent-commkit-dir/libfake.so.1");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(lib.status().message().rfind("/nonexistent-commkit-dir/libfake.so.1: cannot open shared object file", 0), 0u)
      << lib.status().message();
}

TEST(DynamicLibrary, BindFillsATypedPointerOrNamesTheSymbol) {
  auto lib = DynamicLibrary::OpenOne("libc.so.6");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  size_t (*strlen_fn)(const char*) = nullptr;
  ASSERT_TRUE(lib->Bind(strlen_fn, "strlen").ok());
  ASSERT_NE(strlen_fn, nullptr);
  EXPECT_EQ(strlen_fn("commkit"), 7u);
  int (*missing)() = nullptr;
  Status s = lib->Bind(missing, "commkit_no_such_symbol");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("commkit_no_such_symbol"), std::string::npos) << s.message();
  EXPECT_EQ(missing, nullptr);
}

}  // namespace
}  // namespace commkit

// The Store contract (store_contract.h) run unchanged against every store.
#include <fstream>

#include "commkit/comm/file_store.h"
#include "commkit/comm/hash_store.h"
#include "commkit/comm/prefix_store.h"
#include "commkit/comm/tcp_store.h"
#include "store_contract.h"

namespace commkit::testing {
namespace {

StoreInstance MakeHash() {
  auto store = std::make_shared<HashStore>();
  return {store, store, nullptr};
}

StoreInstance MakeTcp() {
  TcpStoreOptions server_opts;
  server_opts.is_server = true;
  server_opts.port = 0;
  server_opts.bind_host = "127.0.0.1";
  server_opts.token = "contract";
  auto a = TcpStore::Create(server_opts);
  if (!a.ok()) {
    ADD_FAILURE() << a.status().ToString();
    return {};
  }
  TcpStoreOptions client_opts;
  client_opts.port = (*a)->port();
  client_opts.token = "contract";
  auto b = TcpStore::Create(client_opts);
  if (!b.ok()) {
    ADD_FAILURE() << b.status().ToString();
    return {};
  }
  return {std::shared_ptr<Store>(std::move(*a)), std::shared_ptr<Store>(std::move(*b)), nullptr};
}

StoreInstance MakeFile() {
  auto dir = std::make_shared<TempDir>();
  auto a = FileStore::Open(dir->path() / "store");
  auto b = FileStore::Open(dir->path() / "store");
  if (!a.ok() || !b.ok()) {
    ADD_FAILURE() << "file store open failed";
    return {};
  }
  return {std::shared_ptr<Store>(std::move(*a)), std::shared_ptr<Store>(std::move(*b)), dir};
}

StoreInstance MakePrefixOverHash() {
  auto inner = std::make_shared<HashStore>();
  return {std::make_shared<PrefixStore>("job1", inner), std::make_shared<PrefixStore>("job1", inner), inner};
}

StoreInstance MakePrefixOverTcp() {
  auto tcp = MakeTcp();
  if (!tcp.a) return {};
  return {std::make_shared<PrefixStore>("grp", tcp.a), std::make_shared<PrefixStore>("grp", tcp.b), nullptr};
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreContract,
                         ::testing::Values(StoreFactory{"hash", &MakeHash}, StoreFactory{"tcp", &MakeTcp},
                                           StoreFactory{"file", &MakeFile},
                                           StoreFactory{"prefix_hash", &MakePrefixOverHash},
                                           StoreFactory{"prefix_tcp", &MakePrefixOverTcp}),
                         PrintStoreFactory);

TEST(PrefixStore, IsolatesNamespacesAndReportsUnprefixedKeys) {
  auto inner = std::make_shared<HashStore>();
  PrefixStore a("a", inner), b("b", inner);
  COMMKIT_ASSERT_OK(a.Set("k", "from-a"));
  EXPECT_FALSE(*b.Check({"k"}));
  EXPECT_EQ(*inner->Get("a/k", std::chrono::milliseconds(100)), "from-a");
  Status s = b.Wait({"k"}, std::chrono::milliseconds(50));
  ASSERT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_NE(s.message().find("[k]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("prefix 'b'"), std::string::npos) << s.message();
}

TEST(FileStore, UnusableDirectoryIsAClearError) {
  TempDir dir;
  dir.Write("file", "x");
  auto store = FileStore::Open(dir.path() / "file" / "sub");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("file store: cannot use directory"), std::string::npos)
      << store.status().message();
}

TEST(FileStore, CorruptFileIsDataLossNotACrash) {
  TempDir dir;
  auto store = FileStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  COMMKIT_ASSERT_OK((*store)->Set("k", "v"));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    if (entry.path().filename().string().rfind("k-", 0) == 0) std::ofstream(entry.path()) << "xy";
  auto v = (*store)->Get("k", std::chrono::milliseconds(100));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace commkit::testing

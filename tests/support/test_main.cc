// main() for every commkit test binary: GoogleTest, with commkit's logs at warn unless COMMKIT_LOG says.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

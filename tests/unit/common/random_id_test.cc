#include "common/random_id.h"

#include "gtest/gtest.h"

namespace weir {
namespace {

TEST(RandomIdTest, HasThePrefixAndSixteenHexDigits) {
  std::string id = RandomId("jm-");
  ASSERT_EQ(id.size(), 3u + 16u);
  EXPECT_EQ(id.substr(0, 3), "jm-");
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 3), std::string::npos);
  EXPECT_NE(RandomId(), RandomId());
  EXPECT_TRUE(IsSafeId(id));
}

TEST(RandomIdTest, IsSafeIdRefusesWhatCouldNameAnotherPath) {
  for (const char* bad : {"", "..", "../x", "a/b", "a b", "x\n", "/etc"}) EXPECT_FALSE(IsSafeId(bad)) << bad;
  EXPECT_FALSE(IsSafeId(std::string(65, 'a')));
  EXPECT_TRUE(IsSafeId("0123456789abcdef"));
  EXPECT_TRUE(IsSafeId("tm-local_1"));
}

}  // namespace
}  // namespace weir

// A Nexmark-style event generator: people, auctions and bids of an online
// auction site, in the proportions and with the hot-item skew of the Nexmark
// benchmark (per 50 events: 1 person, 3 auctions, 46 bids; half the bids go
// to the hottest recent auction, a quarter come from the hottest bidder).
// Deterministic: event i depends only on i and the seed, so the input of a
// run can be rebuilt and any run compared with another.
//
// Each event is one CSV line (the Kafka record value), its event time the
// Kafka record timestamp, its key the auction id (bids, auctions) or the
// person id:
//   B,<auction>,<bidder>,<price cents>,<channel>,<time ms>
//   A,<id>,<seller>,<category>,<initial bid cents>,<expires ms>,<time ms>
//   P,<id>,<name>,<city>,<state>,<time ms>
// Event times are base_ms + i * 1000 / events_per_second, in order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace weir::bench::nexmark {

struct Event {
  std::string key;
  std::string value;
  int64_t time_ms = 0;
};

class Generator {
 public:
  Generator(int64_t base_ms, int64_t events_per_second, uint64_t seed = 42)
      : base_ms_(base_ms), rate_(events_per_second), seed_(seed) {}

  Event At(int64_t i) const {
    static constexpr const char* kChannels[] = {"apple", "google", "facebook", "baidu"};
    static constexpr const char* kCities[] = {"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland",
                                              "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"};
    static constexpr const char* kStates[] = {"AZ", "CA", "ID", "OR", "WA", "WY"};
    const int64_t time = base_ms_ + i * 1000 / rate_;
    const int64_t epoch = i / 50;
    const int64_t offset = i % 50;
    uint64_t r = Mix(static_cast<uint64_t>(i) ^ seed_);
    auto next = [&r](uint64_t bound) {
      r = Mix(r);
      return static_cast<int64_t>(r % bound);
    };
    // Ids: persons and auctions numbered from 1000 in the order they appear.
    const int64_t last_person = kFirstId + epoch;
    const int64_t last_auction = kFirstId + epoch * 3 + (offset >= 1 ? std::min<int64_t>(offset, 3) - 1 : -1);
    if (offset == 0) {
      return {std::to_string(last_person),
              absl::StrCat("P,", last_person, ",person-", last_person, ",", kCities[next(10)], ",", kStates[next(6)],
                           ",", time),
              time};
    }
    if (offset <= 3) {
      const int64_t seller = next(4) == 0 ? last_person : kFirstId + next(static_cast<uint64_t>(epoch + 1));
      return {std::to_string(last_auction),
              absl::StrCat("A,", last_auction, ",", seller, ",", 10 + next(5), ",", 100 + next(100000), ",",
                           time + 10000 + next(100000), ",", time),
              time};
    }
    // Bids: half on the hottest recent auction, the rest on one of the 100
    // in flight; a quarter from the hottest bidder.
    const int64_t auction = next(2) == 0 ? (last_auction / kHotAuctionRatio) * kHotAuctionRatio
                                         : std::max<int64_t>(kFirstId, last_auction - next(100));
    const int64_t bidder = next(4) == 0 ? (last_person / kHotBidderRatio) * kHotBidderRatio
                                        : std::max<int64_t>(kFirstId, last_person - next(1000));
    const int64_t price = 100 + next(1000000);
    return {std::to_string(auction),
            absl::StrCat("B,", auction, ",", bidder, ",", price, ",", kChannels[next(4)], ",", time), time};
  }

 private:
  static constexpr int64_t kFirstId = 1000;
  static constexpr int64_t kHotAuctionRatio = 2;
  static constexpr int64_t kHotBidderRatio = 4;

  // SplitMix64.
  static uint64_t Mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  const int64_t base_ms_;
  const int64_t rate_;
  const uint64_t seed_;
};

}  // namespace weir::bench::nexmark

// Idleness across the subtasks of one Kafka source.
//
// Downstream, an operator ignores an input channel while its source subtask
// is idle. So when subtask A's records move A's watermark, nothing holds it
// for the records subtask B has still to read of a partition B declared
// idle: B's partitions come back from idleness a fetch later (up to
// fetch.wait.max.ms), and by then event time may have passed them. Within
// one subtask the broker check of KafkaSource settles this (the watermark
// moves past an idle partition only as far as a ListOffsets answer asked
// after its records were read shows that partition has nothing); across
// subtasks each needs to know where the others' idle partitions stand.
//
// The board: a Kafka consumer group per source ("weir-idleness-<job
// id>-<operator id>") in which each subtask commits, for each of its
// partitions, its position as the offset and "weir idle v1" or "weir active
// v1" as the metadata. No consumer ever joins the group; the commits are
// simple commits (generation -1), and the group's coordinator keeps them.
//
// The protocol, for a source whose partitions are not all one subtask's
// (every step is on the subtask's own steady clock; `grace` is 1 s):
//
//  Owner B of partition q, before q may be idle:
//   1. q is eligible (quiet for the idleness, read to the brokers' end):
//      B commits "idle at X" (X its position) to the board.
//   2. Once the commit is acknowledged (at t_ack), B waits `grace`.
//   3. Then it asks the brokers for q's end offset; an answer asked after
//      t_ack + grace that shows no record past X opens q's gate (q idle).
//   A record or an answer showing records for q closes the gate at once
//   and commits "active"; a position that moved starts again at 1.
//
//  Any subtask A, before its watermark moves, needs one of:
//   (fast) its last read of the board was sent less than grace - margin
//          ago and shows no other subtask's partition idle; or
//   (slow) a check asked after the records that move the watermark were
//          read: a board read, then the end offsets of every partition it
//          shows idle, each at most its committed position X.
//
// Why no record is late that was at the brokers before A read the records
// that moved its watermark (time t_r): take r in q, owned by B, and the
// moment A's watermark W reaches downstream. If B's channel is active
// there, downstream holds event time at B's watermark. If it is idle, B
// sent IDLE after opening q's gate, so after a check asked at t_c >=
// t_ack + grace. Slow path: A's board read came after t_r and found q idle
// at X with q's end <= X after that, so r (before t_r) is below X and B
// read and sent it before IDLE, ahead of it on its channel. Fast path:
// A's read, sent at t_b, did not see the commit, so t_b < t_ack, and A
// emits W before t_b + grace, so t_r < t_ack + grace <= t_c: r was at the
// brokers when B checked, and B's gate stayed shut until B had read it.
// Only the order of one channel and the one broker's view are relied on,
// never clocks of two machines compared.
//
// The cost, only for sources with idleness and more than one subtask that
// has partitions: one OffsetFetch per read_interval per subtask, one
// OffsetCommit per idleness change, a ListOffsets per watermark move while
// another subtask has an idle partition, and a partition goes idle about
// grace plus two round trips after the idleness.
//
// A stale entry (a crashed earlier attempt's) is harmless as long as only
// q's owner writes it afterwards: "idle at X" only makes A check q's end
// against X (so it may hold A until q's new owner commits), and "active"
// asks nothing of A while the new owner's channel holds downstream from its
// start. (A zombie of an earlier attempt, resumed and still running, could
// write over its successor's entry; that is not guarded against.) A
// partition without an entry counts as not known, and holds A like an idle
// one whose end is not known, until its owner's first post. Kafka expires
// the offsets of a group without members offsets.retention.minutes after
// their commit, so each subtask posts its entries again every
// refresh_ms.
//
// Thread-safety: SharedIdleness is the task thread's alone (not
// thread-safe). IdlenessBoard is called from the source's broker-requests
// thread only; its librdkafka handle is its own.
#ifndef WEIR_CONNECTORS_KAFKA_SHARED_IDLENESS_H_
#define WEIR_CONNECTORS_KAFKA_SHARED_IDLENESS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "librdkafka/rdkafkacpp.h"

namespace weir::connectors::kafka_internal {

class ClientEvents;

using TopicPartitionKey = std::pair<std::string, int32_t>;

// One partition's entry on the board.
struct BoardEntry {
  bool idle = false;
  int64_t position = -1;  // the owner's next offset when it committed
};

// A board read: each asked partition's entry, nullopt where it has none.
struct BoardRead {
  std::vector<std::optional<BoardEntry>> entries;
};

// "weir idle v1" / "weir active v1", and back; nullopt for anything else
// (another writer's metadata counts as no entry).
std::string BoardMetadata(bool idle);
std::optional<bool> ParseBoardMetadata(absl::string_view metadata);

// The group of one source operator of one job; only the characters Kafka
// tools take without quoting.
std::string BoardGroupId(absl::string_view job_id, absl::string_view operator_id);

// Whether every partition `read` shows idle has nothing past its position
// by `ends` (the same order; -1: unknown), and every partition has an entry.
// On false, *why names the first that has records (or whose end or entry
// is unknown).
bool PeersCaughtUp(const std::vector<TopicPartitionKey>& partitions, const BoardRead& read,
                   const std::vector<int64_t>& ends, std::string* why);

// The decisions of the protocol above; the caller does the I/O.
class SharedIdleness {
 public:
  struct Options {
    int64_t grace_ms = 1000;
    int64_t read_interval_ms = 250;
    // Posts again after this long without one (Kafka's offset retention).
    int64_t refresh_ms = 10 * 60 * 1000;
  };

  // A post to the board: the owner's partitions (own order) and version.
  struct Post {
    int64_t version = 0;
    std::vector<BoardEntry> entries;
  };

  SharedIdleness(std::vector<TopicPartitionKey> own, std::vector<TopicPartitionKey> peers, Options options);

  const std::vector<TopicPartitionKey>& own() const { return own_; }
  const std::vector<TopicPartitionKey>& peers() const { return peers_; }

  // Owner side, every tick for each own partition `i` that is not
  // finished: whether it is `eligible` (idle but for the gate), its
  // `position`, and the brokers' last known end of it (`end`, -1 unknown)
  // with when that answer was asked (`end_asked_ms`). Returns whether its
  // gate is open now.
  bool Gate(size_t i, bool eligible, int64_t position, int64_t end, int64_t end_asked_ms, int64_t now_ms);
  // A partition finished (bounded): it has nothing more to post.
  void Finish(size_t i);
  // What to commit now, if anything changed since the last post (or the
  // last one failed, or refresh_ms passed since the last that succeeded);
  // at most one is out at a time.
  std::optional<Post> TakePost(int64_t now_ms);
  // The post `version` was committed (ok) at `now_ms`, or failed.
  void OnPosted(int64_t version, bool ok, int64_t now_ms);
  // Whether a gate waits for an end offsets' answer asked from now on.
  bool WantsEndCheck(int64_t now_ms) const;

  // Observer side.
  bool WantsRead(int64_t now_ms) const { return !read_out_ && now_ms - read_sent_ms_ >= options_.read_interval_ms; }
  void OnReadSent(int64_t now_ms) {
    read_out_ = true;
    read_sent_ms_ = now_ms;
  }
  // A read (sent at `sent_ms`) came back; nullopt: it failed.
  void OnRead(int64_t sent_ms, const std::optional<BoardRead>& read);
  // The fast path: the watermark may move now without a check.
  bool PeersClear(int64_t now_ms) const;
  // Peers idle as of the last read, by name, for messages.
  std::vector<std::string> IdlePeers() const;

 private:
  struct Own {
    bool finished = false;
    bool idle_posted = false;  // the current post says idle at position
    int64_t position = -1;
    int64_t idle_version = 0;  // the first post carrying it (0: not yet taken)
    int64_t acked_ms = -1;     // when a post carrying it was acknowledged
    bool open = false;
  };

  const std::vector<TopicPartitionKey> own_;
  const std::vector<TopicPartitionKey> peers_;
  const Options options_;
  std::vector<Own> owned_;
  bool dirty_ = true;  // the board does not yet say what owned_ does
  bool post_out_ = false;
  int64_t version_ = 0;
  int64_t posted_ms_ = -1;  // when the last post succeeded
  // The last read that came back, and when it was sent.
  bool read_out_ = false;
  int64_t read_sent_ms_ = -(int64_t{1} << 40);
  std::optional<BoardRead> last_read_;
  int64_t last_read_sent_ms_ = -(int64_t{1} << 40);
};

// The board's I/O: a librdkafka consumer handle of the board's group that
// only commits and reads committed offsets.
class IdlenessBoard {
 public:
  // `conf` configures the handle (the source's properties; group.id is set
  // here). Fails when librdkafka refuses the configuration.
  static absl::StatusOr<std::unique_ptr<IdlenessBoard>> Create(RdKafka::Conf& conf, const std::string& group,
                                                               std::string client);
  ~IdlenessBoard();

  absl::Status Post(const std::vector<TopicPartitionKey>& partitions, const std::vector<BoardEntry>& entries,
                    int timeout_ms);
  absl::StatusOr<BoardRead> Read(const std::vector<TopicPartitionKey>& partitions, int timeout_ms);

 private:
  IdlenessBoard() = default;
  void ServeEvents();
  std::unique_ptr<ClientEvents> events_;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer_;
};

}  // namespace weir::connectors::kafka_internal

#endif  // WEIR_CONNECTORS_KAFKA_SHARED_IDLENESS_H_

#include "jobmanager/ha/etcd_leader_election.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging/logging.h"
#include "common/status_macros.h"

namespace weir::jobmanager::ha {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static const auto log = logging::Get("leader-election");
  return log;
}

}  // namespace

absl::Status EtcdLeaderElectionOptions::Validate() const {
  if (cluster_id.empty() || cluster_id.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("high-availability.cluster-id '", cluster_id, "' must be non-empty and hold no '/'"));
  }
  if (address.empty()) return absl::InvalidArgumentError("leader election: this process's address is empty");
  if (lease_ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat("high-availability.etcd.lease-ttl must be at least 1 s, not ",
                                                   absl::FormatDuration(lease_ttl)));
  }
  if (write_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("leader election: write timeout must be positive");
  }
  return backoff.Validate();
}

absl::StatusOr<std::unique_ptr<EtcdLeaderElection>> EtcdLeaderElection::Create(
    std::shared_ptr<etcd::EtcdClient> client, EtcdLeaderElectionOptions options) {
  RETURN_IF_ERROR(options.Validate());
  if (client == nullptr) return absl::InvalidArgumentError("leader election: no etcd client");
  return std::unique_ptr<EtcdLeaderElection>(new EtcdLeaderElection(std::move(client), std::move(options)));
}

EtcdLeaderElection::EtcdLeaderElection(std::shared_ptr<etcd::EtcdClient> client, EtcdLeaderElectionOptions options)
    : client_(std::move(client)),
      options_(std::move(options)),
      prefix_(absl::StrCat("/weir/", options_.cluster_id, "/")),
      ttl_(absl::Seconds(std::ceil(absl::ToDoubleSeconds(options_.lease_ttl)))) {}

EtcdLeaderElection::~EtcdLeaderElection() { Stop(); }

std::string EtcdLeaderElection::store_key(absl::string_view key) const { return absl::StrCat(prefix_, "store/", key); }

absl::Status EtcdLeaderElection::Start(LeadershipListener* listener) {
  {
    absl::MutexLock lock(&mu_);
    if (listener_ != nullptr || thread_.joinable()) {
      return absl::FailedPreconditionError("leader election already started");
    }
    listener_ = listener;
    stopping_ = false;
  }
  Log()->info("leader election of cluster {} started: address {}, lease {}, etcd {}", options_.cluster_id,
              options_.address, absl::FormatDuration(ttl_), absl::StrJoin(client_->options().endpoints, ","));
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void EtcdLeaderElection::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    cv_.SignalAll();
    if (watch_ != nullptr) watch_->Cancel();
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  listener_ = nullptr;
  Log()->info("leader election of cluster {} stopped ({})", options_.cluster_id, options_.address);
}

void EtcdLeaderElection::SetCutOffForTesting(bool cut_off) {
  absl::MutexLock lock(&mu_);
  cut_off_ = cut_off;
  cv_.SignalAll();
  if (cut_off && watch_ != nullptr) watch_->Cancel();
}

bool EtcdLeaderElection::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

bool EtcdLeaderElection::cut_off() const {
  absl::MutexLock lock(&mu_);
  return cut_off_;
}

bool EtcdLeaderElection::WaitUntil(absl::Time until) {
  absl::MutexLock lock(&mu_);
  const bool was_cut_off = cut_off_;
  while (!stopping_ && cut_off_ == was_cut_off && absl::Now() < until) cv_.WaitWithDeadline(&mu_, until);
  return !stopping_;
}

void EtcdLeaderElection::Run() {
  retry::Backoff backoff(options_.backoff);
  absl::Status last_error;
  while (!stopping()) {
    if (cut_off()) {
      WaitUntil(absl::Now() + absl::Milliseconds(100));
      continue;
    }
    int64_t lease_id = 0;
    absl::Time lease_sent;
    int64_t watch_from = 0;
    absl::StatusOr<std::optional<Epoch>> won = Campaign(&lease_id, &lease_sent, &watch_from);
    if (!won.ok()) {
      // Logged when the error changes, not at every try of an outage.
      if (won.status().ToString() != last_error.ToString()) {
        Log()->warn("leader election of cluster {}: campaign failed, retrying: {}", options_.cluster_id,
                    won.status());
      }
      last_error = won.status();
      WaitUntil(absl::Now() + backoff.Next());
      continue;
    }
    last_error = absl::OkStatus();
    backoff.Reset();
    if (won->has_value()) {
      Lead(lease_id, **won, lease_sent);
      continue;
    }
    absl::Status watched = WatchUntilDeleted(watch_from);
    if (!watched.ok() && !stopping() && !cut_off()) {
      Log()->debug("leader election of cluster {}: watch ended: {}", options_.cluster_id, watched);
      WaitUntil(absl::Now() + backoff.Next());
    }
  }
}

absl::StatusOr<std::optional<Epoch>> EtcdLeaderElection::Campaign(int64_t* lease_id, absl::Time* lease_sent,
                                                                 int64_t* watch_from) {
  if (unrevoked_lease_ != 0) {
    if (!RevokeLease(unrevoked_lease_, "a past leadership's")) {
      return absl::UnavailableError("the lease of the last leadership is not revoked yet");
    }
    unrevoked_lease_ = 0;
  }
  const absl::Time deadline = absl::Now() + client_->options().call_timeout;
  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(absl::ToInt64Seconds(ttl_));
  *lease_sent = absl::Now();
  ASSIGN_OR_RETURN(etcdserverpb::LeaseGrantResponse lease, client_->LeaseGrant(grant, deadline));
  if (!lease.error().empty()) return absl::UnavailableError(absl::StrCat("etcd lease grant: ", lease.error()));
  *lease_id = lease.id();

  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_key(leader_key());
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(leader_key());
  put->set_value(options_.address);
  put->set_lease(*lease_id);
  txn.add_failure()->mutable_request_range()->set_key(leader_key());
  absl::StatusOr<etcdserverpb::TxnResponse> result = client_->Txn(txn, absl::Now() + client_->options().call_timeout);
  if (!result.ok()) {
    RevokeLease(*lease_id, "campaign failed");
    return result.status();
  }
  if (result->succeeded()) return std::optional<Epoch>(result->header().revision());

  const auto& kvs = result->responses(0).response_range().kvs();
  if (!kvs.empty() && kvs[0].lease() == *lease_id) {
    // Our own put, applied by a try whose answer was lost and retried.
    return std::optional<Epoch>(kvs[0].create_revision());
  }
  RevokeLease(*lease_id, "campaign lost");
  if (kvs.empty()) {
    // Deleted between the compare and the read: campaign again at once.
    *watch_from = 0;
    return absl::UnavailableError("leader key vanished during the campaign");
  }
  Log()->info("leader election of cluster {}: {} is standby; leader {} (epoch {})", options_.cluster_id,
              options_.address, kvs[0].value(), kvs[0].create_revision());
  *watch_from = result->header().revision() + 1;
  return std::optional<Epoch>();
}

void EtcdLeaderElection::Lead(int64_t lease_id, Epoch epoch, absl::Time lease_sent) {
  LeadershipListener* listener;
  {
    absl::MutexLock lock(&mu_);
    listener = listener_;
  }
  Log()->info("leader election of cluster {}: {} granted leadership, epoch {} (lease {:x}, {})", options_.cluster_id,
              options_.address, epoch, lease_id, absl::FormatDuration(ttl_));
  const absl::Duration renew_every = ttl_ / 3;
  const absl::Duration step_down_after = ttl_ / 2;
  leading_until_ns_.store(absl::ToUnixNanos(lease_sent + step_down_after));
  listener->Granted(epoch);

  // The server restarted the lease's time after we sent the grant (or the
  // renewal): counting from the send is on the safe side.
  absl::Time renewed = lease_sent;
  absl::Time next_try = renewed + renew_every;
  std::string reason;
  while (true) {
    const absl::Time step_down_at = renewed + step_down_after;
    if (!WaitUntil(std::min(next_try, step_down_at))) break;  // Stop
    if (absl::Now() >= step_down_at) {
      reason = absl::StrCat("lease not renewed for ", absl::FormatDuration(absl::Now() - renewed));
      break;
    }
    if (absl::Now() < next_try) continue;  // woken by SetCutOffForTesting
    if (cut_off()) {
      next_try = absl::Now() + absl::Milliseconds(100);
      continue;
    }
    const absl::Time sent = absl::Now();
    absl::StatusOr<etcdserverpb::LeaseKeepAliveResponse> kept = client_->KeepAliveOnce(lease_id, step_down_at);
    if (kept.ok() && kept->ttl() > 0) {
      renewed = sent;
      leading_until_ns_.store(absl::ToUnixNanos(renewed + step_down_after));
      next_try = renewed + renew_every;
    } else if (kept.ok()) {
      reason = "lease expired on the server";
      break;
    } else {
      Log()->warn("leader election of cluster {}: renewing lease {:x} (epoch {}) failed: {}", options_.cluster_id,
                  lease_id, epoch, kept.status());
      next_try = absl::Now() + absl::Milliseconds(100);
    }
  }
  // Revoked before anything else: whatever the leader does next must already
  // know it no longer leads.
  leading_until_ns_.store(INT64_MIN);
  listener->Revoked();
  if (reason.empty()) {
    Log()->info("leader election of cluster {}: {} gives up leadership, epoch {}", options_.cluster_id,
                options_.address, epoch);
  } else {
    Log()->warn("leader election of cluster {}: {} steps down, epoch {}: {}", options_.cluster_id, options_.address,
                epoch, reason);
  }
  // A lease that could not be revoked now (etcd down) is revoked before the
  // next campaign: etcd restores leases with a full TTL when it restarts, and
  // the key would hold everyone off until then.
  if (cut_off() || !RevokeLease(lease_id, "leadership ended")) unrevoked_lease_ = lease_id;
}

absl::Status EtcdLeaderElection::WatchUntilDeleted(int64_t revision) {
  etcdserverpb::WatchCreateRequest create;
  create.set_key(leader_key());
  create.set_start_revision(revision);
  ASSIGN_OR_RETURN(std::unique_ptr<etcd::EtcdClient::WatchStream> watch,
                   client_->Watch(create, absl::Now() + client_->options().call_timeout));
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || cut_off_) return absl::CancelledError("stopping");
    watch_ = watch.get();
  }
  absl::Status ended;
  while (true) {
    absl::StatusOr<etcdserverpb::WatchResponse> response = watch->Next();
    if (!response.ok()) {
      ended = response.status();
      break;
    }
    if (response->canceled()) {
      ended = absl::UnavailableError(absl::StrCat("watch canceled by etcd: ", response->cancel_reason()));
      break;
    }
    bool deleted = false;
    for (const mvccpb::Event& event : response->events()) {
      if (event.type() == mvccpb::Event::DELETE) deleted = true;
    }
    if (deleted) break;
  }
  absl::MutexLock lock(&mu_);
  watch_ = nullptr;
  return ended;
}

bool EtcdLeaderElection::RevokeLease(int64_t lease_id, const char* why) {
  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(lease_id);
  absl::Status revoked = client_->LeaseRevoke(revoke, absl::Now() + client_->options().call_timeout).status();
  // NotFound: expired already.
  if (revoked.ok() || absl::IsNotFound(revoked)) return true;
  Log()->warn("leader election of cluster {}: revoking lease {:x} ({}) failed: {}", options_.cluster_id, lease_id, why,
              revoked);
  return false;
}

absl::StatusOr<std::optional<LeaderInfo>> EtcdLeaderElection::GetLeader() {
  etcdserverpb::RangeRequest range;
  range.set_key(leader_key());
  ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response,
                   client_->Range(range, absl::Now() + options_.write_timeout));
  if (response.kvs().empty()) return std::optional<LeaderInfo>();
  return std::optional<LeaderInfo>(LeaderInfo{response.kvs(0).value(), response.kvs(0).create_revision()});
}

absl::Status EtcdLeaderElection::FencedWrite(Epoch epoch, absl::string_view what, absl::string_view key,
                                             etcdserverpb::RequestOp op) {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* leads = txn.add_compare();
  leads->set_key(leader_key());
  leads->set_target(etcdserverpb::Compare::CREATE);
  leads->set_result(etcdserverpb::Compare::EQUAL);
  leads->set_create_revision(epoch);
  *txn.add_success() = std::move(op);
  txn.add_failure()->mutable_request_range()->set_key(leader_key());
  absl::StatusOr<etcdserverpb::TxnResponse> result = client_->Txn(txn, absl::Now() + options_.write_timeout);
  if (!result.ok()) return Annotate(result.status(), absl::StrCat(what, " of ", key, " for epoch ", epoch));
  if (result->succeeded()) return absl::OkStatus();
  const auto& kvs = result->responses(0).response_range().kvs();
  std::string now = kvs.empty() ? std::string("no leader")
                                : absl::StrCat("leader ", kvs[0].value(), " epoch ", kvs[0].create_revision());
  return absl::AbortedError(
      absl::StrCat(what, " of ", key, " fenced: epoch ", epoch, " no longer leads cluster ", options_.cluster_id,
                   " (now: ", now, ")"));
}

absl::Status EtcdLeaderElection::FencedPut(Epoch epoch, absl::string_view key, absl::string_view value) {
  etcdserverpb::RequestOp op;
  op.mutable_request_put()->set_key(store_key(key));
  op.mutable_request_put()->set_value(std::string(value));
  return FencedWrite(epoch, "write", key, std::move(op));
}

absl::Status EtcdLeaderElection::FencedDelete(Epoch epoch, absl::string_view key) {
  etcdserverpb::RequestOp op;
  op.mutable_request_delete_range()->set_key(store_key(key));
  return FencedWrite(epoch, "delete", key, std::move(op));
}

absl::StatusOr<std::optional<std::string>> EtcdLeaderElection::Get(absl::string_view key) {
  etcdserverpb::RangeRequest range;
  range.set_key(store_key(key));
  ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response,
                   client_->Range(range, absl::Now() + options_.write_timeout));
  if (response.kvs().empty()) return std::optional<std::string>();
  return std::optional<std::string>(response.kvs(0).value());
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> EtcdLeaderElection::GetPrefix(
    absl::string_view prefix, size_t max_keys) {
  // etcd's key range for a prefix: [prefix, prefix with its last byte + 1).
  // The full key always ends with "store/..." so it is never empty, and its
  // last byte is never 0xff ('/' or a key's own character).
  const std::string begin = store_key(prefix);
  std::string end = begin;
  end.back() = static_cast<char>(end.back() + 1);
  const size_t strip = store_key("").size();
  // In pages, so that no response comes near gRPC's 4 MiB message bound
  // (job-store values are at most a few hundred KiB), all at one revision.
  constexpr int64_t kPage = 8;
  std::vector<std::pair<std::string, std::string>> found;
  std::string from = begin;
  int64_t revision = 0;
  const absl::Time deadline = absl::Now() + options_.write_timeout;
  while (true) {
    etcdserverpb::RangeRequest range;
    range.set_key(from);
    range.set_range_end(end);
    range.set_limit(kPage);
    range.set_revision(revision);
    ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response, client_->Range(range, deadline));
    if (revision == 0) revision = response.header().revision();
    for (const mvccpb::KeyValue& kv : response.kvs()) {
      if (found.size() == max_keys) {
        return absl::ResourceExhaustedError(absl::StrCat("more than ", max_keys, " keys under ", begin, " in etcd"));
      }
      found.emplace_back(kv.key().substr(strip), kv.value());
    }
    if (!response.more() || response.kvs().empty()) break;
    from = absl::StrCat(response.kvs(response.kvs_size() - 1).key(), std::string(1, '\0'));
  }
  return found;
}

absl::Time EtcdLeaderElection::LeadingUntil() const {
  const int64_t until = leading_until_ns_.load();
  return until == INT64_MIN ? absl::InfinitePast() : absl::FromUnixNanos(until);
}

}  // namespace weir::jobmanager::ha

#include "jobmanager/rpc_fan_out.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/rpc.h"
#include "gtest/gtest.h"
#include "weir/v1/cluster.grpc.pb.h"

namespace weir::jobmanager {
namespace {

// A TaskManager's service that only takes notifications: it records the
// checkpoint ids it was told and how many calls it held at once. Every other
// call is UNIMPLEMENTED, as on a TaskManager of an older version.
class CountingService final : public v1::TaskExecutorService::Service {
 public:
  grpc::Status NotifyCheckpoint(grpc::ServerContext*, const v1::NotifyCheckpointRequest* request,
                                v1::NotifyCheckpointResponse*) override {
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
      max_in_flight_ = std::max(max_in_flight_, in_flight_);
      ids_.push_back(request->checkpoint_id());
    }
    absl::SleepFor(absl::Milliseconds(2));  // long enough for calls to overlap
    absl::MutexLock lock(&mu_);
    --in_flight_;
    return request->checkpoint_id() % 7 == 3 ? grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job")
                                             : grpc::Status::OK;
  }

  int max_in_flight() {
    absl::MutexLock lock(&mu_);
    return max_in_flight_;
  }
  size_t calls() {
    absl::MutexLock lock(&mu_);
    return ids_.size();
  }

 private:
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int max_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> ids_ ABSL_GUARDED_BY(mu_);
};

class RpcFanOutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rpc::ServerOptions options;
    options.services = {&service_};
    absl::StatusOr<rpc::StartedServer> started = rpc::StartServer(options);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    stub_ = v1::TaskExecutorService::NewStub(rpc::CreateChannel(absl::StrCat("127.0.0.1:", started->port)));
  }
  void TearDown() override { server_->Shutdown(); }

  CountingService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::TaskExecutorService::Stub> stub_;
};

// Every call is made once, each result lands where its call was added, and
// no more than max_in_flight are outstanding at any time.
TEST_F(RpcFanOutTest, EveryCallOnceInOrderAndBounded) {
  constexpr int kCalls = 200;
  constexpr size_t kMaxInFlight = 8;
  std::vector<v1::NotifyCheckpointRequest> requests(kCalls);
  RpcFanOut<v1::NotifyCheckpointResponse> fan_out(kMaxInFlight);
  for (int i = 0; i < kCalls; ++i) {
    requests[i].set_checkpoint_id(i);
    fan_out.Add(absl::Seconds(30), [this, &requests, i](grpc::ClientContext* context, grpc::CompletionQueue* cq) {
      return stub_->PrepareAsyncNotifyCheckpoint(context, requests[i], cq);
    });
  }
  const auto results = fan_out.Wait();
  ASSERT_EQ(results.size(), static_cast<size_t>(kCalls));
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(results[i].status.error_code(), i % 7 == 3 ? grpc::StatusCode::NOT_FOUND : grpc::StatusCode::OK) << i;
  }
  EXPECT_EQ(service_.calls(), static_cast<size_t>(kCalls));
  EXPECT_LE(service_.max_in_flight(), static_cast<int>(kMaxInFlight));
  EXPECT_GE(service_.max_in_flight(), 1);
}

// A method the server does not have comes back UNIMPLEMENTED (what the job
// master's fallback to one call per task keys on); an address nobody listens
// on comes back as an error within the call's deadline, not a hang.
TEST_F(RpcFanOutTest, UnimplementedAndUnreachable) {
  auto nowhere = v1::TaskExecutorService::NewStub(rpc::CreateChannel("127.0.0.1:1"));
  v1::DeployTasksRequest deploy;
  v1::NotifyCheckpointRequest notify;
  RpcFanOut<v1::DeployTasksResponse> fan_out;
  fan_out.Add(absl::Seconds(30), [&](grpc::ClientContext* context, grpc::CompletionQueue* cq) {
    return stub_->PrepareAsyncDeployTasks(context, deploy, cq);
  });
  fan_out.Add(absl::Seconds(2), [&](grpc::ClientContext* context, grpc::CompletionQueue* cq) {
    return nowhere->PrepareAsyncDeployTasks(context, deploy, cq);
  });
  const auto results = fan_out.Wait();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_FALSE(results[1].status.ok());
  EXPECT_NE(results[1].status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

// No calls: Wait returns at once with nothing.
TEST(RpcFanOutEmptyTest, NothingToWaitFor) {
  RpcFanOut<v1::NotifyCheckpointResponse> fan_out;
  EXPECT_TRUE(fan_out.Wait().empty());
}

}  // namespace
}  // namespace weir::jobmanager

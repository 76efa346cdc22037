#include "jobmanager/fenced_job_store.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/crypto/sha256.h"
#include "common/logging/logging.h"
#include "common/process/fault_injection.h"
#include "common/status_macros.h"

namespace weir::jobmanager {
namespace {

constexpr char kRecords[] = "jobs/";
constexpr char kSubmissions[] = "submissions";
// What of a failure message a final status keeps when the record would
// otherwise outgrow kMaxRecordBytes.
constexpr size_t kMaxMessageBytes = 16 << 10;

// The epoch in a submission file's name "<epoch>-<sha256>"; nullopt for any
// other name.
std::optional<int64_t> EpochOfSubmission(absl::string_view name) {
  std::vector<absl::string_view> parts = absl::StrSplit(name, absl::MaxSplits('-', 1));
  int64_t epoch = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &epoch) || !crypto::IsSha256Hex(parts[1])) return std::nullopt;
  return epoch;
}

}  // namespace

FencedJobStore::FencedJobStore(std::shared_ptr<fs::FileSystem> files, std::string root, std::string uri,
                               ha::LeaderElection* election)
    : JobStore(/*fenced=*/true),
      files_(std::move(files)),
      root_(std::move(root)),
      uri_(std::move(uri)),
      election_(election) {}

void FencedJobStore::SetElection(ha::LeaderElection* election) {
  absl::MutexLock lock(&write_mu_);
  election_ = election;
}

ha::LeaderElection* FencedJobStore::election() const {
  absl::MutexLock lock(&write_mu_);
  return election_;
}

std::string FencedJobStore::location() const {
  return absl::StrCat("etcd store/", kRecords, " and ", uri_, "/", kSubmissions);
}

std::string FencedJobStore::RecordKey(absl::string_view job_id) { return absl::StrCat(kRecords, job_id); }

std::string FencedJobStore::Path(absl::string_view relative) const {
  return root_.empty() ? std::string(relative) : absl::StrCat(root_, "/", relative);
}

std::string FencedJobStore::SubmissionDir(absl::string_view job_id) const {
  return Path(absl::StrCat(kSubmissions, "/", job_id));
}

absl::Status FencedJobStore::PutLocked(int64_t epoch, const std::string& job_id, const char* what,
                                       v1::StoredJobRecord record) {
  record.set_written_for_epoch(epoch);
  const std::string bytes = record.SerializeAsString();
  if (static_cast<int64_t>(bytes.size()) > kMaxRecordBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("job ", job_id, "'s ", what, ": its record would be ",
                                                     bytes.size(), " bytes, over ", kMaxRecordBytes));
  }
  if (election_ == nullptr) return absl::FailedPreconditionError("the job store has no election");
  return Annotate(election_->FencedPut(epoch, RecordKey(job_id), bytes),
                  absl::StrCat("writing job ", job_id, "'s ", what, " for leader epoch ", epoch));
}

absl::Status FencedJobStore::UpdateLocked(int64_t epoch, const std::string& job_id, const char* what,
                                          const std::function<void(v1::StoredJobRecord*)>& change) {
  if (election_ == nullptr) return absl::FailedPreconditionError("the job store has no election");
  absl::StatusOr<std::optional<std::string>> bytes = election_->Get(RecordKey(job_id));
  if (!bytes.ok()) return Annotate(bytes.status(), absl::StrCat("reading job ", job_id, "'s record"));
  if (!bytes->has_value()) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " has no record in the job store (removed?)"));
  }
  v1::StoredJobRecord record;
  if (!record.ParseFromString(**bytes)) {
    return absl::DataLossError(absl::StrCat("job ", job_id, "'s record in the job store is not a record"));
  }
  change(&record);
  return PutLocked(epoch, job_id, what, record);
}

absl::Status FencedJobStore::DoSaveSubmission(int64_t epoch, const std::string& job_id,
                                              const v1::SubmitJobRequest& request) {
  const std::string bytes = request.SerializeAsString();
  if (static_cast<int64_t>(bytes.size()) > kMaxSubmissionBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("job ", job_id, "'s submission is ", bytes.size(),
                                                     " bytes, over ", kMaxSubmissionBytes));
  }
  const std::string sha256 = crypto::Sha256Hex(bytes);
  // The epoch in the name keeps a deposed leader's collection off it (see
  // the class comment), the hash makes a second write of it harmless.
  const std::string relative = absl::StrCat(kSubmissions, "/", job_id, "/", epoch, "-", sha256);
  absl::MutexLock lock(&write_mu_);
  absl::Status written = files_->Write(Path(relative), bytes, fs::WriteMode::kCreateNew);
  if (!written.ok() && !absl::IsAlreadyExists(written)) {
    return Annotate(written, absl::StrCat("writing job ", job_id, "'s submission to ", uri_));
  }
  v1::StoredJobRecord record;
  record.set_submission_path(relative);
  record.set_submission_sha256(sha256);
  record.set_submission_size(static_cast<int64_t>(bytes.size()));
  return PutLocked(epoch, job_id, "submission", record);
}

absl::Status FencedJobStore::DoSaveAttempt(int64_t epoch, const std::string& job_id, int attempt) {
  absl::MutexLock lock(&write_mu_);
  return UpdateLocked(epoch, job_id, "attempt", [attempt](v1::StoredJobRecord* r) {
    r->set_last_attempt(attempt);
    // Tests freeze a leader here, with its write about to go to etcd.
    fault::MaybeStop(fault::Point::kJobManagerStopBeforeStoreWrite);
  });
}

absl::Status FencedJobStore::DoSaveFinal(int64_t epoch, const std::string& job_id, const v1::JobStatus& status) {
  absl::MutexLock lock(&write_mu_);
  return UpdateLocked(epoch, job_id, "final status", [&status](v1::StoredJobRecord* r) {
    *r->mutable_final_status() = status;
    if (static_cast<int64_t>(r->ByteSizeLong()) <= kMaxRecordBytes) return;
    // A job of many tasks: what a restarted JobManager shows of it is its
    // state and why it ended, not each task.
    v1::JobStatus* kept = r->mutable_final_status();
    kept->clear_tasks();
    if (kept->error().size() > kMaxMessageBytes) kept->mutable_error()->resize(kMaxMessageBytes);
    if (kept->last_failure().size() > kMaxMessageBytes) kept->mutable_last_failure()->resize(kMaxMessageBytes);
  });
}

absl::Status FencedJobStore::DoRemove(int64_t epoch, const std::string& job_id) {
  absl::MutexLock lock(&write_mu_);
  if (election_ == nullptr) return absl::FailedPreconditionError("the job store has no election");
  RETURN_IF_ERROR(Annotate(election_->FencedDelete(epoch, RecordKey(job_id)),
                           absl::StrCat("removing job ", job_id, " for leader epoch ", epoch)));
  // No record names these files any more, and no later one will (job ids
  // are not reused).
  absl::StatusOr<std::vector<fs::FileInfo>> files = files_->List(absl::StrCat(SubmissionDir(job_id), "/"));
  if (!files.ok()) return Annotate(files.status(), absl::StrCat("listing job ", job_id, "'s submission files"));
  std::vector<std::string> paths;
  for (const fs::FileInfo& file : *files) paths.push_back(file.path);
  return files_->DeleteMany(paths);
}

void FencedJobStore::CollectLocked(int64_t epoch, const std::vector<std::string>& referenced) {
  absl::StatusOr<std::vector<fs::FileInfo>> files = files_->List(Path(absl::StrCat(kSubmissions, "/")));
  auto log = logging::Get("jobmanager");
  if (!files.ok()) {
    log->warn("job store: cannot list the submission files in {} to collect them: {}", uri_,
              files.status().message());
    return;
  }
  const absl::flat_hash_set<std::string> keep(referenced.begin(), referenced.end());
  std::vector<std::string> unreferenced;
  for (const fs::FileInfo& file : *files) {
    const size_t slash = file.path.rfind('/');
    const std::optional<int64_t> written_for =
        EpochOfSubmission(slash == std::string::npos ? file.path : file.path.substr(slash + 1));
    if (!written_for.has_value() || *written_for >= epoch || keep.contains(file.path)) continue;
    unreferenced.push_back(file.path);
  }
  if (unreferenced.empty()) return;
  absl::Status deleted = files_->DeleteMany(unreferenced);
  log->info("job store: collected {} submission files of earlier leaders that no job names{}", unreferenced.size(),
            deleted.ok() ? "" : absl::StrCat(" (some remain: ", deleted.message(), ")"));
}

std::vector<StoredJob> FencedJobStore::DoLoad(std::optional<int64_t> epoch, std::vector<std::string>* problems) {
  ha::LeaderElection* const elected = election();
  std::vector<StoredJob> jobs;
  if (elected == nullptr) {
    problems->push_back("the job store has no election to read from");
    return jobs;
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> records =
      elected->GetPrefix(kRecords, kMaxJobs);
  if (!records.ok()) {
    problems->push_back(absl::StrCat("every job: the job store's records cannot be read (", records.status().message(),
                                     ")"));
    return jobs;
  }
  std::vector<std::string> referenced;
  for (const auto& [key, value] : *records) {
    const std::string id = key.substr(std::string(kRecords).size());
    if (!IsJobId(id)) {
      problems->push_back(absl::StrCat("store key ", key, ": not a job id"));
      continue;
    }
    v1::StoredJobRecord record;
    if (static_cast<int64_t>(value.size()) > kMaxRecordBytes || !record.ParseFromString(value)) {
      problems->push_back(absl::StrCat("job ", id, ": its record in etcd (", value.size(), " bytes) is not a record"));
      continue;
    }
    const std::string path = Path(record.submission_path());
    referenced.push_back(path);
    StoredJob job;
    job.job_id = id;
    absl::StatusOr<std::string> bytes = absl::InvalidArgumentError("its record names no file");
    if (!record.submission_path().empty() && record.submission_size() <= kMaxSubmissionBytes) {
      bytes = files_->ReadFile(path, std::max<int64_t>(record.submission_size(), 0));
    }
    std::string why;
    if (!bytes.ok()) {
      why = std::string(bytes.status().message());
    } else if (static_cast<int64_t>(bytes->size()) != record.submission_size() ||
               crypto::Sha256Hex(*bytes) != record.submission_sha256()) {
      why = absl::StrCat("its ", bytes->size(), " bytes are not the ", record.submission_size(),
                         " bytes of SHA-256 ", record.submission_sha256(), " written");
    } else if (!job.request.ParseFromString(*bytes)) {
      why = "not a submission";
    }
    if (!why.empty()) {
      problems->push_back(absl::StrCat("job ", id, ": its submission ", uri_, "/", record.submission_path(),
                                       " cannot be read (", why, ")"));
      continue;
    }
    job.last_attempt = std::max(record.last_attempt(), 0);
    if (record.has_final_status()) job.final_status = record.final_status();
    jobs.push_back(std::move(job));
  }
  if (epoch.has_value()) {
    absl::MutexLock lock(&write_mu_);
    CollectLocked(*epoch, referenced);
  }
  return jobs;
}

}  // namespace weir::jobmanager

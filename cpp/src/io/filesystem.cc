#include "io/filesystem.h"

#include <arrow/buffer.h>
#include <arrow/filesystem/localfs.h>
#include <arrow/filesystem/s3fs.h>
#include <arrow/io/caching.h>
#include <arrow/io/interfaces.h>
#include <arrow/util/io_util.h>
#include <arrow/util/thread_pool.h>
#include <arrow/util/uri.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>

#include "io/prefetched_file.h"
#include "util/recycling_pool.h"
#include "util/uri.h"

namespace stoker {
namespace {

using arrow::fs::FileInfo;
using arrow::fs::FileInfoVector;
using arrow::fs::FileSelector;
using arrow::fs::FileSystem;

bool IsObjectStoreScheme(const std::string& scheme) {
  return scheme == "s3" || scheme == "gs" || scheme == "gcs" || scheme == "abfs" ||
         scheme == "abfss" || scheme == "az";
}

std::string PercentEncode(const std::string& value) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<bool> ParseBool(const std::string& key, const std::string& value) {
  const std::string v = LowerAscii(value);
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return MakeError(ErrorKind::kInvalidOption,
                   "storage_options['" + key + "'] must be true or false");
}

Result<double> ParseSeconds(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !std::isfinite(v) || v <= 0) {
    return MakeError(ErrorKind::kInvalidOption,
                     "storage_options['" + key + "'] must be a positive number of seconds");
  }
  return v;
}

// Our own keys, valid for every remote scheme.
constexpr const char* kConcurrencyKey = "request_concurrency";

Result<int> ParseConcurrency(const std::map<std::string, std::string>& storage) {
  auto it = storage.find(kConcurrencyKey);
  if (it == storage.end()) return 0;
  char* end = nullptr;
  const int64_t v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || v < 1 || v > 4096) {
    return MakeError(ErrorKind::kInvalidOption, std::string("storage_options['") + kConcurrencyKey +
                                                    "'] must be an integer in [1, 4096]");
  }
  return static_cast<int>(v);
}

// The SDK's own retries are off: RetryingFileSystem owns the policy, for every scheme alike.
class NoRetryStrategy : public arrow::fs::S3RetryStrategy {
 public:
  bool ShouldRetry(const AWSErrorDetail&, int64_t) override { return false; }
  int64_t CalculateDelayBeforeNextRetry(const AWSErrorDetail&, int64_t) override { return 0; }
};

Status EnsureS3() {
  static std::mutex mutex;  // Arrow asks callers to serialise initialisation
  std::lock_guard<std::mutex> lock(mutex);
  const Status st = arrow::fs::EnsureS3Initialized();
  if (!st.ok()) {
    return MakeError(ErrorKind::kStorage, "cannot initialise S3 support: " + st.message());
  }
  return Status::OK();
}

const char* const kS3Keys[] = {"region",
                               "endpoint_override",
                               "scheme",
                               "access_key",
                               "secret_key",
                               "session_token",
                               "anonymous",
                               "role_arn",
                               "session_name",
                               "external_id",
                               "connect_timeout",
                               "request_timeout",
                               "force_virtual_addressing",
                               "tls_verify_certificates",
                               "tls_ca_file_path",
                               "tls_ca_dir_path",
                               kConcurrencyKey};

Result<std::shared_ptr<FileSystem>> OpenS3(const std::string& uri, const StorageOptions& options,
                                           const std::vector<std::string>& secrets,
                                           std::string* path) {
  const auto& storage = options.storage_options;
  for (const auto& [key, value] : storage) {
    if (std::find(std::begin(kS3Keys), std::end(kS3Keys), key) == std::end(kS3Keys)) {
      std::string known;
      for (const char* k : kS3Keys) known += (known.empty() ? "" : ", ") + std::string(k);
      return MakeError(ErrorKind::kInvalidOption,
                       "storage_options has unknown key '" + key + "' for s3://; known: " + known);
    }
  }
  // Every value is checked before anything touches the network.
  auto get = [&](const char* key) -> const std::string* {
    auto it = storage.find(key);
    return it == storage.end() ? nullptr : &it->second;
  };
  if (auto* v = get("scheme"); v != nullptr && *v != "http" && *v != "https") {
    return MakeError(ErrorKind::kInvalidOption,
                     "storage_options['scheme'] must be 'http' or 'https'");
  }
  double connect_timeout = -1, request_timeout = -1;
  if (auto* v = get("connect_timeout")) {
    STOKER_ASSIGN_OR_RAISE(connect_timeout, ParseSeconds("connect_timeout", *v));
  }
  if (auto* v = get("request_timeout")) {
    STOKER_ASSIGN_OR_RAISE(request_timeout, ParseSeconds("request_timeout", *v));
  }
  bool virtual_addressing = false, verify_certificates = true, anonymous = false;
  if (auto* v = get("force_virtual_addressing")) {
    STOKER_ASSIGN_OR_RAISE(virtual_addressing, ParseBool("force_virtual_addressing", *v));
  }
  if (auto* v = get("tls_verify_certificates")) {
    STOKER_ASSIGN_OR_RAISE(verify_certificates, ParseBool("tls_verify_certificates", *v));
  }
  if (auto* v = get("anonymous")) {
    STOKER_ASSIGN_OR_RAISE(anonymous, ParseBool("anonymous", *v));
  }
  const std::string* access = get("access_key");
  const std::string* secret = get("secret_key");
  const std::string* token = get("session_token");
  const std::string* role = get("role_arn");
  if ((access == nullptr) != (secret == nullptr)) {
    return MakeError(ErrorKind::kInvalidOption,
                     "storage_options needs both access_key and secret_key, or neither");
  }
  if (token != nullptr && access == nullptr) {
    return MakeError(ErrorKind::kInvalidOption,
                     "storage_options['session_token'] needs access_key and secret_key");
  }
  if ((access != nullptr) + static_cast<int>(anonymous) + (role != nullptr) > 1) {
    return MakeError(ErrorKind::kInvalidOption,
                     "storage_options: give one of access_key/secret_key, anonymous=true or "
                     "role_arn");
  }
  STOKER_RETURN_NOT_OK(EnsureS3());

  // Keys that also steer S3Options::FromUri (which otherwise asks AWS for the bucket's region)
  // are handed to it when the URI lacks them; storage_options win over the URI below.
  std::string full = uri;
  {
    auto parsed = arrow::util::Uri::FromString(uri);
    if (!parsed.ok()) {
      return MakeError(ErrorKind::kInvalidOption,
                       "source '" + RedactUri(uri) + "' is not a valid URI: " +
                           RedactSecrets(parsed.status().message(), secrets));
    }
    auto items = parsed->query_items();
    std::vector<std::pair<std::string, std::string>> query =
        items.ok() ? *items : decltype(query){};
    std::string extra;
    for (const char* key : {"region", "endpoint_override", "scheme"}) {
      auto it = storage.find(key);
      if (it == storage.end()) continue;
      const bool in_uri =
          std::any_of(query.begin(), query.end(), [&](const auto& kv) { return kv.first == key; });
      if (!in_uri) extra += std::string(key) + "=" + PercentEncode(it->second) + "&";
    }
    if (!extra.empty()) {
      extra.pop_back();
      const size_t hash = full.find('#');
      const std::string fragment = hash == std::string::npos ? "" : full.substr(hash);
      full = full.substr(0, hash);
      full += (full.find('?') == std::string::npos ? "?" : "&") + extra + fragment;
    }
  }
  // Without user info in the URI, FromUri builds the SDK's default credentials chain, whose
  // providers ask the instance-metadata service for credentials and the region: 7 requests,
  // seconds where nothing answers there (14.5 s against a listener that never replies), before
  // credentials given here replace the chain anyway. A placeholder user skips it.
  const bool explicit_credentials = access != nullptr || anonymous || role != nullptr;
  auto parsed_full = arrow::util::Uri::FromString(full);
  if (explicit_credentials && parsed_full.ok() && parsed_full->username().empty()) {
    const size_t authority = full.find("://");
    if (authority != std::string::npos) full.insert(authority + 3, "stoker-placeholder@");
  }
  auto from_uri = arrow::fs::S3Options::FromUri(full, path);
  if (!from_uri.ok()) {
    return MakeError(ErrorKind::kInvalidOption,
                     "cannot open source '" + RedactUri(uri) +
                         "': " + RedactSecrets(from_uri.status().message(), secrets));
  }
  arrow::fs::S3Options s3 = *from_uri;
  if (auto* v = get("region")) s3.region = *v;
  if (auto* v = get("endpoint_override")) s3.endpoint_override = *v;
  if (auto* v = get("scheme")) s3.scheme = *v;
  if (connect_timeout > 0) s3.connect_timeout = connect_timeout;
  if (request_timeout > 0) s3.request_timeout = request_timeout;
  if (get("force_virtual_addressing")) s3.force_virtual_addressing = virtual_addressing;
  if (get("tls_verify_certificates")) s3.tls_verify_certificates = verify_certificates;
  if (auto* v = get("tls_ca_file_path")) s3.tls_ca_file_path = *v;
  if (auto* v = get("tls_ca_dir_path")) s3.tls_ca_dir_path = *v;
  if (anonymous) {
    s3.ConfigureAnonymousCredentials();
  } else if (access != nullptr) {
    s3.ConfigureAccessKey(*access, *secret, token != nullptr ? *token : "");
  } else if (role != nullptr) {
    const std::string* name = get("session_name");
    const std::string* external = get("external_id");
    s3.ConfigureAssumeRoleCredentials(*role, name ? *name : "", external ? *external : "");
  }
  // Otherwise FromUri kept credentials from the URI's user info, or the default AWS chain
  // (environment, config and credentials files, web identity, instance metadata).
  s3.retry_strategy = std::make_shared<NoRetryStrategy>();

  auto fs = arrow::fs::S3FileSystem::Make(s3);
  if (!fs.ok()) {
    return MakeError(ErrorKind::kStorage, "cannot set up S3 for '" + RedactUri(uri) + "': " +
                                              RedactSecrets(fs.status().message(), secrets));
  }
  return std::static_pointer_cast<FileSystem>(*fs);
}

// ---- stopping remote calls ------------------------------------------------------------------

// How often a call waiting for a backoff sleep or a request_concurrency slot checks whether it
// should stop (its stop token, or the process exiting: neither can wake a condition variable).
constexpr double kStopPollSeconds = 0.05;
// The AWS SDK's timeouts where S3Options::connect_timeout / request_timeout are not given.
constexpr double kSdkConnectTimeoutSeconds = 1.0;
constexpr double kSdkRequestTimeoutSeconds = 3.0;

// Every remote call in progress in the process (any filesystem, any thread), so that exit can
// wait for them. Never destroyed: threads of Arrow's I/O pool may still use it while the
// process's static objects are being destroyed.
struct RemoteCalls {
  std::mutex mutex;
  std::condition_variable idle_cv;
  int64_t in_progress = 0;  // GUARDED_BY(mutex)
  // GUARDED_BY(mutex) connect + request timeout, the longest of the filesystems opened so far.
  double longest_timeout_s = kSdkConnectTimeoutSeconds + kSdkRequestTimeoutSeconds;
  bool exit_hook = false;            // GUARDED_BY(mutex) registered with std::atexit
  std::atomic<bool> exiting{false};  // StopRemoteRequests() was called
};

RemoteCalls& Calls() {
  static RemoteCalls* calls = [] {
    auto* created = new RemoteCalls();
    // A fork while a thread holds the lock would leave it held in the child, whose exit hook
    // takes it; and the parent's calls in progress do not exist in the child.
    pthread_atfork([] { Calls().mutex.lock(); }, [] { Calls().mutex.unlock(); },
                   [] {
                     Calls().in_progress = 0;
                     Calls().mutex.unlock();
                   });
    return created;
  }();
  return *calls;
}

// Counts one remote call in progress for its lifetime.
class CallInProgress {
 public:
  CallInProgress() {
    std::lock_guard<std::mutex> lock(Calls().mutex);
    ++Calls().in_progress;
  }
  ~CallInProgress() {
    RemoteCalls& calls = Calls();
    std::lock_guard<std::mutex> lock(calls.mutex);
    if (--calls.in_progress == 0) calls.idle_cv.notify_all();
  }
  CallInProgress(const CallInProgress&) = delete;
  CallInProgress& operator=(const CallInProgress&) = delete;
};

// A program that never calls StopRemoteRequests (C++ without Python) still stops its remote
// calls at exit, before the static objects that an I/O thread would touch are destroyed (those
// constructed before this registration: Arrow's I/O pool, memory pools, S3 state).
void RegisterExitHook(double timeout_s) {
  RemoteCalls& calls = Calls();
  std::lock_guard<std::mutex> lock(calls.mutex);
  calls.longest_timeout_s = std::max(calls.longest_timeout_s, timeout_s);
  if (calls.exit_hook) return;
  calls.exit_hook = true;
  std::atexit([] { StopRemoteRequests(RemoteRequestDrainSeconds()); });
}

// The stop token of this thread's RemoteStopScope; filesystems opened on the thread keep it.
thread_local arrow::StopToken scoped_stop = arrow::StopToken::Unstoppable();

// ---- retrying wrapper ---------------------------------------------------------------------

struct Shared {
  RetryPolicy policy;
  std::string prefix;
  std::vector<std::string> secrets;
  int max_concurrency = 0;
  // Requested: every call gives up at its next step (RemoteStopScope, for an interrupted open).
  arrow::StopToken stop = arrow::StopToken::Unstoppable();

  std::mutex mutex;
  std::condition_variable cv;
  int in_flight = 0;

  std::atomic<int64_t> requests{0};
  std::atomic<int64_t> retries{0};
  std::atomic<int64_t> failures{0};
  std::atomic<int64_t> backoff_ns{0};

  // Sleeps between retries wait on this, so InterruptRetryWaits can cut them short. A call
  // notes `interrupts` when it starts: a later interrupt stops it at its next step.
  std::mutex wait_mutex;
  std::condition_variable wait_cv;
  std::atomic<uint64_t> interrupts{0};

  // True when the full delay passed; false as soon as `stopped()` (checked at least every
  // kStopPollSeconds, and at once on an interrupt).
  template <typename Stopped>
  bool Sleep(double seconds, Stopped&& stopped) {
    using Clock = std::chrono::steady_clock;
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds));
    const auto poll = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(kStopPollSeconds));
    std::unique_lock<std::mutex> lock(wait_mutex);
    while (!stopped()) {
      const auto now = Clock::now();
      if (now >= end) return true;
      wait_cv.wait_for(lock, std::min(end - now, poll));
    }
    return false;
  }
  void Interrupt() {
    {
      std::lock_guard<std::mutex> lock(wait_mutex);
      interrupts.fetch_add(1);
    }
    wait_cv.notify_all();
  }

  std::mutex sizes_mutex;
  std::unordered_map<std::string, int64_t> sizes;  // from listings: opens need no HEAD

  // Takes a request_concurrency slot; false (no slot taken) once `stopped()`.
  template <typename Stopped>
  bool Acquire(Stopped&& stopped) {
    if (max_concurrency <= 0) return true;
    std::unique_lock<std::mutex> lock(mutex);
    while (in_flight >= max_concurrency) {
      if (stopped()) return false;
      cv.wait_for(lock, std::chrono::duration<double>(kStopPollSeconds));
    }
    ++in_flight;
    return true;
  }
  void Release() {
    if (max_concurrency <= 0) return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      --in_flight;
    }
    cv.notify_one();
  }

  void Remember(const FileInfo& info) {
    if (info.type() != arrow::fs::FileType::File || info.size() < 0) return;
    std::lock_guard<std::mutex> lock(sizes_mutex);
    sizes[info.path()] = info.size();
  }
  int64_t KnownSize(const std::string& path) {
    std::lock_guard<std::mutex> lock(sizes_mutex);
    auto it = sizes.find(path);
    return it == sizes.end() ? arrow::fs::kNoSize : it->second;
  }
};

double UnitRandom() {
  // Jitter only spreads retries out; it never reaches the data, so any entropy will do.
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
}

std::string Fmt(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", seconds);
  return buf;
}

// Runs `call` until it succeeds, fails permanently, or max_retries transient failures have
// been retried. `what` is e.g. "read bytes [0, 100) of"; `path` is the filesystem's path.
// Gives up at its next step (before an attempt, in a backoff sleep, waiting for a slot) once
// `stop` or the filesystem's stop token is requested, InterruptRetryWaits is called, or the
// process exits (StopRemoteRequests); an attempt under way is never cut short.
template <typename Call>
auto WithRetries(Shared& shared, const std::string& what, const std::string& path, Call&& call,
                 const arrow::StopToken& stop = arrow::StopToken::Unstoppable())
    -> decltype(call()) {
  const CallInProgress counted;
  const auto start = std::chrono::steady_clock::now();
  const uint64_t interrupts = shared.interrupts.load();
  auto stopped = [&] {
    return Calls().exiting.load(std::memory_order_relaxed) || stop.IsStopRequested() ||
           shared.stop.IsStopRequested() || shared.interrupts.load() != interrupts;
  };
  std::string message;  // the last error
  auto stopped_error = [&] {
    shared.failures.fetch_add(1, std::memory_order_relaxed);
    return MakeError(
        ErrorKind::kStorage,
        "cannot " + what + " '" + shared.prefix + path + "': " +
            (message.empty() ? "stopped before the request was sent (the loader was closed "
                               "or interrupted, or the process is exiting)"
                             : "stopped while waiting to retry; last error: " + message));
  };
  for (int attempt = 0;; ++attempt) {
    if (stopped() || !shared.Acquire(stopped)) return stopped_error();
    auto result = call();
    shared.Release();
    shared.requests.fetch_add(1, std::memory_order_relaxed);
    if (result.ok()) return result;
    const Status& st = result.status();
    const std::string object = "'" + shared.prefix + path + "'";
    message = RedactSecrets(st.message(), shared.secrets);
    const StorageFailure failure = ClassifyStorageError(st);
    if (failure != StorageFailure::kTransient || attempt >= shared.policy.max_retries) {
      shared.failures.fetch_add(1, std::memory_order_relaxed);
    }
    switch (failure) {
      case StorageFailure::kNotFound:
        return MakeError(ErrorKind::kNotFound, object + " does not exist: " + message);
      case StorageFailure::kDenied:
        return MakeError(
            ErrorKind::kStorage,
            "access denied to " + object +
                " (check the credentials and the permissions on the bucket): " + message);
      case StorageFailure::kPermanent:
        return MakeError(ErrorKind::kStorage, "cannot " + what + " " + object + ": " + message);
      case StorageFailure::kTransient:
        break;
    }
    if (attempt >= shared.policy.max_retries) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return MakeError(ErrorKind::kStorage,
                       "cannot " + what + " " + object + ": still failing after " +
                           std::to_string(attempt) + " retries over " + Fmt(elapsed) +
                           " s (max_retries=" + std::to_string(shared.policy.max_retries) +
                           "); last error: " + message);
    }
    const double delay = BackoffDelay(shared.policy, attempt, UnitRandom());
    shared.retries.fetch_add(1, std::memory_order_relaxed);
    shared.backoff_ns.fetch_add(static_cast<int64_t>(delay * 1e9), std::memory_order_relaxed);
    if (!shared.Sleep(delay, stopped)) return stopped_error();
  }
}

class RetryingFile : public arrow::io::RandomAccessFile {
 public:
  RetryingFile(std::shared_ptr<Shared> shared, std::string path,
               std::shared_ptr<arrow::io::RandomAccessFile> base)
      : shared_(std::move(shared)), path_(std::move(path)), base_(std::move(base)) {}

  Status Close() override { return base_->Close(); }
  bool closed() const override { return base_->closed(); }
  Result<int64_t> Tell() const override { return position_; }
  Status Seek(int64_t position) override {
    position_ = position;
    return Status::OK();
  }
  Result<int64_t> GetSize() override {
    return WithRetries(*shared_, "get the size of", path_, [&] { return base_->GetSize(); });
  }
  Result<int64_t> Read(int64_t nbytes, void* out) override {
    ARROW_ASSIGN_OR_RAISE(const int64_t n, ReadAt(position_, nbytes, out));
    position_ += n;
    return n;
  }
  Result<std::shared_ptr<arrow::Buffer>> Read(int64_t nbytes) override {
    ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position_, nbytes));
    position_ += buffer->size();
    return buffer;
  }
  Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override {
    return WithRetries(*shared_, Range(position, nbytes), path_,
                       [&] { return base_->ReadAt(position, nbytes, out); });
  }
  Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    return WithRetries(*shared_, Range(position, nbytes), path_,
                       [&] { return base_->ReadAt(position, nbytes); });
  }
  Status WillNeed(const std::vector<arrow::io::ReadRange>& ranges) override {
    return base_->WillNeed(ranges);
  }
  // Runs the read with its retries on the context's executor (Arrow's I/O pool), like the base
  // class, but the retries stop with the context's stop token: a pipeline that stops gets its
  // requests back within one attempt instead of after every retry.
  arrow::Future<std::shared_ptr<arrow::Buffer>> ReadAsync(const arrow::io::IOContext& context,
                                                          int64_t position,
                                                          int64_t nbytes) override {
    return ReadAsync(context, position, nbytes, /*allow_short_read=*/true);
  }
  arrow::Future<std::shared_ptr<arrow::Buffer>> ReadAsync(const arrow::io::IOContext& context,
                                                          int64_t position, int64_t nbytes,
                                                          bool allow_short_read) override {
    auto self = std::dynamic_pointer_cast<RetryingFile>(shared_from_this());
    const arrow::StopToken stop = context.stop_token();
    return arrow::DeferNotOk(context.executor()->Submit(
        stop,
        [self, position, nbytes, allow_short_read,
         stop]() -> Result<std::shared_ptr<arrow::Buffer>> {
          ARROW_ASSIGN_OR_RAISE(auto buffer,
                                WithRetries(
                                    *self->shared_, Range(position, nbytes), self->path_,
                                    [&] { return self->base_->ReadAt(position, nbytes); }, stop));
          if (!allow_short_read && buffer->size() != nbytes) {
            return Status::IOError("File too short: expected to be able to read ", nbytes,
                                   " bytes, got ", buffer->size());
          }
          return buffer;
        }));
  }

 private:
  static std::string Range(int64_t position, int64_t nbytes) {
    return "read bytes [" + std::to_string(position) + ", " + std::to_string(position + nbytes) +
           ") of";
  }

  std::shared_ptr<Shared> shared_;
  std::string path_;
  std::shared_ptr<arrow::io::RandomAccessFile> base_;
  int64_t position_ = 0;
};

class RetryingFileSystem : public FileSystem {
 public:
  RetryingFileSystem(std::shared_ptr<FileSystem> base, std::shared_ptr<Shared> shared)
      : FileSystem(base->io_context()), base_(std::move(base)), shared_(std::move(shared)) {}

  std::string type_name() const override { return base_->type_name(); }
  bool Equals(const FileSystem& other) const override { return this == &other; }
  Result<std::string> NormalizePath(std::string path) override {
    return base_->NormalizePath(std::move(path));
  }
  Result<std::string> PathFromUri(const std::string& uri) const override {
    return base_->PathFromUri(uri);
  }

  Shared& shared() const { return *shared_; }

  Result<FileInfo> GetFileInfo(const std::string& path) override {
    ARROW_ASSIGN_OR_RAISE(FileInfo info, WithRetries(*shared_, "get information about", path,
                                                     [&] { return base_->GetFileInfo(path); }));
    shared_->Remember(info);
    return info;
  }
  Result<FileInfoVector> GetFileInfo(const FileSelector& select) override {
    ARROW_ASSIGN_OR_RAISE(FileInfoVector infos, WithRetries(*shared_, "list", select.base_dir, [&] {
                            return base_->GetFileInfo(select);
                          }));
    for (const auto& info : infos) shared_->Remember(info);
    return infos;
  }

  Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInputFile(
      const std::string& path) override {
    FileInfo info(path, arrow::fs::FileType::File);
    info.set_size(shared_->KnownSize(path));
    return OpenInputFile(info);
  }
  Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInputFile(
      const FileInfo& info) override {
    ARROW_ASSIGN_OR_RAISE(auto file, WithRetries(*shared_, "open", info.path(), [&] {
                            return info.size() >= 0 ? base_->OpenInputFile(info)
                                                    : base_->OpenInputFile(info.path());
                          }));
    return std::make_shared<RetryingFile>(shared_, info.path(), std::move(file));
  }
  Result<std::shared_ptr<arrow::io::InputStream>> OpenInputStream(
      const std::string& path) override {
    return WithRetries(*shared_, "open", path, [&] { return base_->OpenInputStream(path); });
  }

  Result<std::shared_ptr<const arrow::KeyValueMetadata>> ReadObjectMetadata(
      const std::string& path) {
    return WithRetries(*shared_, "get information about", path,
                       [&]() -> Result<std::shared_ptr<const arrow::KeyValueMetadata>> {
                         // By path, without the listed size: the store then asks for the object's
                         // headers (for S3 a HEAD, whose ETag and version id Arrow's FileInfo does
                         // not keep).
                         ARROW_ASSIGN_OR_RAISE(auto file, base_->OpenInputFile(path));
                         return file->ReadMetadata();
                       });
  }

  // A source is read-only: writes go straight to the base filesystem, without retries.
  Status CreateDir(const std::string& path, bool recursive) override {
    return base_->CreateDir(path, recursive);
  }
  Status DeleteDir(const std::string& path) override { return base_->DeleteDir(path); }
  Status DeleteDirContents(const std::string& path, bool missing_dir_ok) override {
    return base_->DeleteDirContents(path, missing_dir_ok);
  }
  Status DeleteRootDirContents() override { return base_->DeleteRootDirContents(); }
  Status DeleteFile(const std::string& path) override { return base_->DeleteFile(path); }
  Status Move(const std::string& src, const std::string& dest) override {
    return base_->Move(src, dest);
  }
  Status CopyFile(const std::string& src, const std::string& dest) override {
    return base_->CopyFile(src, dest);
  }
  Result<std::shared_ptr<arrow::io::OutputStream>> OpenOutputStream(
      const std::string& path,
      const std::shared_ptr<const arrow::KeyValueMetadata>& metadata) override {
    return base_->OpenOutputStream(path, metadata);
  }
  Result<std::shared_ptr<arrow::io::OutputStream>> OpenAppendStream(
      const std::string& path,
      const std::shared_ptr<const arrow::KeyValueMetadata>& metadata) override {
    return base_->OpenAppendStream(path, metadata);
  }

 private:
  std::shared_ptr<FileSystem> base_;
  std::shared_ptr<Shared> shared_;
};

bool Contains(const std::string& haystack, const char* needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

std::string DisplayPrefix(const std::string& uri_or_path, const FileSystem& fs) {
  if (!IsRemote(fs)) return "";
  const std::string scheme = UriScheme(uri_or_path);
  if (IsObjectStoreScheme(scheme)) return scheme + "://";
  auto uri = arrow::util::Uri::FromString(uri_or_path);
  if (!uri.ok()) return scheme + "://";
  std::string out = scheme + "://" + uri->host();
  const std::string port = uri->port_text();
  if (!port.empty()) {
    out.push_back(':');
    out.append(port);
  }
  return out;
}

bool IsRemote(const FileSystem& fs) { return fs.type_name() != "local"; }

Result<std::shared_ptr<const arrow::KeyValueMetadata>> ReadObjectMetadata(FileSystem& fs,
                                                                          const std::string& path) {
  if (auto* retrying = dynamic_cast<RetryingFileSystem*>(&fs)) {
    return retrying->ReadObjectMetadata(path);
  }
  ARROW_ASSIGN_OR_RAISE(auto file, fs.OpenInputFile(path));
  return file->ReadMetadata();
}

void SetReaderProperties(const FileSystem& fs, parquet::ArrowReaderProperties* props) {
  // Local files read on the worker; a task whose bytes the pipeline fetched ahead reads each
  // column chunk inside one request that is already under way (io/prefetched_file.h).
  if (!IsRemote(fs) || InPrefetchScope()) {
    props->set_pre_buffer(false);  // local reads stay on the worker, not Arrow's I/O pool
    return;
  }
  // One request costs about a round trip (tens of ms) plus size / bandwidth, so skipping a gap
  // of up to 1 MiB is cheaper than another request; 64 MiB ranges keep a single GET from
  // holding the whole row group while still amortising the round trip. Not lazy: all ranges of
  // the row group are requested at once, concurrently, on Arrow's I/O pool.
  arrow::io::CacheOptions cache;
  cache.hole_size_limit = int64_t{1} << 20;
  cache.range_size_limit = int64_t{64} << 20;
  cache.lazy = false;
  props->set_pre_buffer(true);
  props->set_cache_options(cache);
}

StorageFailure ClassifyStorageError(const Status& status) {
  if (const auto kind = GetErrorKind(status)) {
    if (*kind == ErrorKind::kNotFound) return StorageFailure::kNotFound;
    return StorageFailure::kPermanent;  // already decided by a lower layer
  }
  const int err = arrow::internal::ErrnoFromStatus(status);
  if (err == ENOENT) return StorageFailure::kNotFound;
  if (err == EACCES || err == EPERM) return StorageFailure::kDenied;
  if (err == ECONNRESET || err == ECONNREFUSED || err == ETIMEDOUT || err == EPIPE ||
      err == EAGAIN || err == ECONNABORTED || err == EHOSTUNREACH || err == ENETUNREACH) {
    return StorageFailure::kTransient;
  }
  const std::string& m = status.message();
  // Arrow's S3 messages read "AWS Error <TYPE> during <Op> operation: ...".
  for (const char* denied : {"ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH",
                             "MISSING_AUTHENTICATION_TOKEN", "EXPIRED_TOKEN",
                             "INVALID_CLIENT_TOKEN_ID", "UNRECOGNIZED_CLIENT", "HTTP status 401",
                             "HTTP status 403", "PERMISSION_DENIED", "Unauthenticated"}) {
    if (Contains(m, denied)) return StorageFailure::kDenied;
  }
  for (const char* missing :
       {"NO_SUCH_BUCKET", "NO_SUCH_KEY", "RESOURCE_NOT_FOUND", "HTTP status 404", "NOT_FOUND"}) {
    if (Contains(m, missing)) return StorageFailure::kNotFound;
  }
  for (const char* transient :
       {"SLOW_DOWN", "SERVICE_UNAVAILABLE", "INTERNAL_FAILURE", "THROTTLING", "THROTTLED",
        "NETWORK_CONNECTION", "REQUEST_TIMEOUT", "REQUEST_LIMIT_EXCEEDED", "TOO_MANY_REQUESTS",
        "HTTP status 5", "HTTP status 429", "curlCode", "Connection reset", "connection reset",
        "timed out", "Timeout", "UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"}) {
    if (Contains(m, transient)) return StorageFailure::kTransient;
  }
  return StorageFailure::kPermanent;
}

double BackoffDelay(const RetryPolicy& policy, int attempt, double unit) {
  const double grown = policy.base_delay_s * std::ldexp(1.0, std::min(attempt, 60));
  const double capped = std::min(grown, policy.max_delay_s);
  return capped * (0.5 + 0.5 * std::clamp(unit, 0.0, 1.0));
}

std::optional<StorageStats> GetStorageStats(const FileSystem& fs) {
  const auto* retrying = dynamic_cast<const RetryingFileSystem*>(&fs);
  if (retrying == nullptr) return std::nullopt;
  const Shared& shared = retrying->shared();
  StorageStats out;
  out.requests = shared.requests.load(std::memory_order_relaxed);
  out.retries = shared.retries.load(std::memory_order_relaxed);
  out.failures = shared.failures.load(std::memory_order_relaxed);
  out.backoff_s = static_cast<double>(shared.backoff_ns.load(std::memory_order_relaxed)) / 1e9;
  return out;
}

void InterruptRetryWaits(const FileSystem& fs) {
  const auto* retrying = dynamic_cast<const RetryingFileSystem*>(&fs);
  if (retrying != nullptr) retrying->shared().Interrupt();
}

RemoteStopScope::RemoteStopScope(arrow::StopToken stop) { scoped_stop = std::move(stop); }

RemoteStopScope::~RemoteStopScope() { scoped_stop = arrow::StopToken::Unstoppable(); }

bool StopRemoteRequests(double timeout_s) {
  RemoteCalls& calls = Calls();
  calls.exiting = true;
  std::unique_lock<std::mutex> lock(calls.mutex);
  return calls.idle_cv.wait_for(lock, std::chrono::duration<double>(std::max(0.0, timeout_s)),
                                [&] { return calls.in_progress == 0; });
}

double RemoteRequestDrainSeconds() {
  RemoteCalls& calls = Calls();
  std::lock_guard<std::mutex> lock(calls.mutex);
  return calls.longest_timeout_s + 1.0;
}

int64_t RemoteCallsInProgress() {
  RemoteCalls& calls = Calls();
  std::lock_guard<std::mutex> lock(calls.mutex);
  return calls.in_progress;
}

std::shared_ptr<FileSystem> MakeRetryingFileSystem(std::shared_ptr<FileSystem> base,
                                                   RetryPolicy policy, std::string display_prefix,
                                                   std::vector<std::string> secrets,
                                                   int max_concurrency) {
  auto shared = std::make_shared<Shared>();
  shared->policy = policy;
  shared->prefix = std::move(display_prefix);
  shared->secrets = std::move(secrets);
  shared->max_concurrency = max_concurrency;
  shared->stop = scoped_stop;
  return std::make_shared<RetryingFileSystem>(std::move(base), std::move(shared));
}

Result<std::shared_ptr<FileSystem>> OpenFileSystem(const std::string& uri_or_path,
                                                   const StorageOptions& options,
                                                   std::string* path) {
  const std::string scheme = UriScheme(uri_or_path);
  std::vector<std::string> secrets;
  for (const char* key : {"secret_key", "session_token"}) {
    auto it = options.storage_options.find(key);
    if (it != options.storage_options.end()) secrets.push_back(it->second);
  }
  if (!scheme.empty() && scheme != "file" && scheme != "local") {
    if (auto uri = arrow::util::Uri::FromString(uri_or_path); uri.ok()) {
      secrets.push_back(uri->password());
    }
    // The password as typed too (percent-encoded), in case a message quotes the raw URI.
    const size_t start = scheme.size() + 3;
    const size_t end = uri_or_path.find_first_of("/?#", start);
    const std::string authority = uri_or_path.substr(start, end - start);
    const size_t at = authority.rfind('@');
    const size_t colon = authority.find(':');
    if (at != std::string::npos && colon != std::string::npos && colon < at) {
      secrets.push_back(authority.substr(colon + 1, at - colon - 1));
    }
  }

  std::shared_ptr<FileSystem> fs;
  if (scheme == "s3") {
    STOKER_ASSIGN_OR_RAISE(fs, OpenS3(uri_or_path, options, secrets, path));
  } else {
    for (const auto& [key, value] : options.storage_options) {
      if (key != kConcurrencyKey && !scheme.empty() && scheme != "file" && scheme != "local") {
        return MakeError(ErrorKind::kInvalidOption,
                         "storage_options['" + key + "'] applies to s3:// sources only; give " +
                             scheme + ":// settings as URI query parameters");
      }
    }
    // Reads allocate from the recycling pool, not Arrow's default (mimalloc in pyarrow's wheels,
    // whose fresh huge pages were a quarter of a wide set's cold epoch: util/recycling_pool.h).
    const arrow::io::IOContext io_context(RecyclingPool::Get());
    auto result = arrow::fs::FileSystemFromUriOrPath(uri_or_path, io_context, path);
    if (!result.ok()) {
      return MakeError(ErrorKind::kInvalidOption,
                       "source '" + RedactUri(uri_or_path) +
                           "' is not a path or URI stoker can open: " +
                           RedactSecrets(result.status().message(), secrets));
    }
    fs = *result;
    // An absolute path gets Arrow's LocalFileSystem with the default IOContext whatever the
    // context given (FileSystemFromUriOrPath): without this, every local read was from mimalloc.
    if (auto local = std::dynamic_pointer_cast<arrow::fs::LocalFileSystem>(fs);
        local && local->io_context().pool() != io_context.pool()) {
      fs = std::make_shared<arrow::fs::LocalFileSystem>(local->options(), io_context);
    }
  }
  if (!IsRemote(*fs)) return fs;
  STOKER_ASSIGN_OR_RAISE(const int concurrency, ParseConcurrency(options.storage_options));
  double timeout_s = kSdkConnectTimeoutSeconds + kSdkRequestTimeoutSeconds;
  if (const auto* s3 = dynamic_cast<const arrow::fs::S3FileSystem*>(fs.get())) {
    const arrow::fs::S3Options& o = s3->options();
    timeout_s = (o.connect_timeout > 0 ? o.connect_timeout : kSdkConnectTimeoutSeconds) +
                (o.request_timeout > 0 ? o.request_timeout : kSdkRequestTimeoutSeconds);
  }
  RegisterExitHook(timeout_s);
  RetryPolicy policy;
  policy.max_retries = options.max_retries;
  policy.base_delay_s = options.retry_base_delay_s;
  policy.max_delay_s = std::max(options.retry_base_delay_s, 5.0);
  std::string prefix = DisplayPrefix(uri_or_path, *fs);
  return MakeRetryingFileSystem(std::move(fs), policy, std::move(prefix), std::move(secrets),
                                concurrency);
}

}  // namespace stoker

// Filesystems for sources: local paths as Arrow opens them; object stores (s3://, gs://, abfs://,
// hdfs://) configured from the URI and StorageOptions::storage_options, and wrapped so that
// transient errors are retried with exponential backoff and jitter.
//
// Messages never contain credentials: user info and query strings are dropped from URIs, and
// every error text from the storage layer is scrubbed of the configured secrets.
// Thread safety: the returned filesystems are safe to share between threads.
#pragma once

#include <arrow/filesystem/filesystem.h>
#include <arrow/util/cancel.h>
#include <parquet/properties.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/error.h"
#include "stoker/options.h"
#include "stoker/redact.h"
#include "stoker/stats.h"

namespace stoker {

/// Opens the filesystem that holds `uri_or_path` and sets `*path` to the path inside it.
/// Errors: kInvalidOption for a bad URI or storage option, kStorage when the store cannot be
/// set up. Remote filesystems retry transient errors per `options.max_retries`.
Result<std::shared_ptr<arrow::fs::FileSystem>> OpenFileSystem(const std::string& uri_or_path,
                                                              const StorageOptions& options,
                                                              std::string* path);

/// What to put in front of a path of `fs` so the user recognises it: "" for local files,
/// "s3://" for S3 (whose paths start with the bucket), "hdfs://host:port" for HDFS.
std::string DisplayPrefix(const std::string& uri_or_path, const arrow::fs::FileSystem& fs);

/// False for the local filesystem, true for object stores and HDFS.
bool IsRemote(const arrow::fs::FileSystem& fs);

/// What the store reports about object `path` when it is opened by name (with retries on a
/// filesystem from OpenFileSystem): for S3 a HEAD's headers (ETag, VersionId, Last-Modified),
/// for GCS the object's generation. May be null or empty (local files, HDFS).
Result<std::shared_ptr<const arrow::KeyValueMetadata>> ReadObjectMetadata(arrow::fs::FileSystem& fs,
                                                                          const std::string& path);

/// Reader settings that depend on where the file lives: remote files pre-buffer the selected
/// column chunks as a few large coalesced range reads; local files read chunk by chunk on the
/// calling thread.
void SetReaderProperties(const arrow::fs::FileSystem& fs, parquet::ArrowReaderProperties* props);

/// What the retry layer of one remote filesystem has done so far (all threads together).
/// The counters of a filesystem returned by OpenFileSystem; nullopt for local filesystems.
/// Contains no names or settings, so it is safe to show in stats.
std::optional<StorageStats> GetStorageStats(const arrow::fs::FileSystem& fs);

/// Stops every call of `fs` in progress at its next step: one sleeping between retries gives up
/// at once, one whose request is under way gives up when that attempt fails instead of retrying
/// (both with a kStorage error). For a pipeline that stops: its workers then exit without
/// waiting out a backoff or more attempts. Calls started later retry as usual. No effect on
/// local filesystems.
void InterruptRetryWaits(const arrow::fs::FileSystem& fs);

/// While alive, the remote filesystems that OpenFileSystem opens on this thread stop once `stop`
/// is requested: their calls, on any thread, give up at the next step (before an attempt, in a
/// backoff sleep, waiting for a request_concurrency slot) and later calls fail at once. For
/// Loader::Open, whose caller may cancel an open that waits for a stalled store. Scopes do not
/// nest.
class RemoteStopScope {
 public:
  explicit RemoteStopScope(arrow::StopToken stop);
  ~RemoteStopScope();
  RemoteStopScope(const RemoteStopScope&) = delete;
  RemoteStopScope& operator=(const RemoteStopScope&) = delete;
};

/// For process exit: makes every remote call of the process give up at its next step and every
/// later call fail at once, then waits up to `timeout_s` for the calls in progress to return
/// (an attempt already sent ends only when the store answers or its request_timeout passes).
/// Returns whether none is left. Must run before S3 is finalised and before static objects are
/// destroyed: a retry woken after that would run in Arrow's and the AWS SDK's torn-down state.
/// Remote filesystems are unusable afterwards.
bool StopRemoteRequests(double timeout_s);

/// How long StopRemoteRequests may need to wait: the longest connect + request timeout of the
/// remote filesystems opened so far (the AWS SDK's 1 s + 3 s where not given), plus 1 s.
double RemoteRequestDrainSeconds();

/// Remote calls (with their retries) in progress in the process, for tests.
int64_t RemoteCallsInProgress();

// ---- exposed for tests -----------------------------------------------------------------

enum class StorageFailure { kTransient, kNotFound, kDenied, kPermanent };

/// Sorts a storage-layer error: 5xx, SlowDown, throttling, resets and timeouts are transient.
StorageFailure ClassifyStorageError(const Status& status);

struct RetryPolicy {
  int max_retries = 5;
  double base_delay_s = 0.1;
  double max_delay_s = 5.0;  // one sleep never exceeds this, so a stop waits at most this long
};

/// Seconds to wait before retry `attempt` (0-based): base * 2^attempt capped at max_delay_s,
/// scaled by a jitter factor in [0.5, 1.0) taken from `unit` in [0, 1).
double BackoffDelay(const RetryPolicy& policy, int attempt, double unit);

/// Wraps `base` with retries, names objects as `display_prefix + path` in errors, removes each
/// of `secrets` from error texts, and allows at most `max_concurrency` requests at once
/// (0: no limit).
std::shared_ptr<arrow::fs::FileSystem> MakeRetryingFileSystem(
    std::shared_ptr<arrow::fs::FileSystem> base, RetryPolicy policy, std::string display_prefix,
    std::vector<std::string> secrets, int max_concurrency);

}  // namespace stoker

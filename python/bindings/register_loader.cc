#include <arrow/util/cancel.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>
#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "register.h"
#include "stoker/loader.h"
#include "stoker/system.h"
#include "util/output_keys.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// How often Engine.open checks for signals while Loader::Open runs, and how long an interrupted
// open may take to wind down before it is left to finish on its own.
constexpr auto kSignalPoll = std::chrono::milliseconds(50);
constexpr auto kInterruptGrace = std::chrono::milliseconds(200);

// One Loader::Open running on a helper thread (see OpenInterruptibly).
struct PendingOpen {
  explicit PendingOpen(LoaderOptions caller_options) : options(std::move(caller_options)) {}
  const LoaderOptions options;  // a copy: the caller's is gone once it has been interrupted
  arrow::StopSource stop;
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;                       // GUARDED_BY(mutex)
  bool abandoned = false;                  // GUARDED_BY(mutex) the caller was interrupted
  Result<std::unique_ptr<Loader>> result;  // GUARDED_BY(mutex)
};

// Interrupted opens still running (their requests end at the next retry or their timeout).
// Never destroyed: such a thread may end while exit() destroys static objects.
struct AbandonedOpens {
  std::mutex mutex;
  std::condition_variable cv;
  int running = 0;  // GUARDED_BY(mutex)
};
AbandonedOpens& Abandoned() {
  static auto* abandoned = [] {
    auto* created = new AbandonedOpens();
    // The exit hook takes the lock in a fork()ed child too, where the parent's opens do not run.
    pthread_atfork([] { Abandoned().mutex.lock(); }, [] { Abandoned().mutex.unlock(); },
                   [] {
                     Abandoned().running = 0;
                     Abandoned().mutex.unlock();
                   });
    return created;
  }();
  return *abandoned;
}

void RunOpen(std::shared_ptr<PendingOpen> pending) {
  auto result = Loader::Open(pending->options, pending->stop.token());
  {
    std::lock_guard<std::mutex> lock(pending->mutex);
    if (!pending->abandoned) {
      pending->result = std::move(result);
      pending->done = true;
      pending->cv.notify_all();
      return;  // the caller joins this thread, then owns `pending` alone
    }
  }
  if (pending->options.columns.user_transform) {
    // The user transform may hold the last reference to a Python object, which only a thread
    // holding the GIL may drop, and this thread must not ask for the GIL while the interpreter
    // exits. Leaked on purpose: a few bytes once per interrupted open.
    new std::shared_ptr<PendingOpen>(std::move(pending));
    new Result<std::unique_ptr<Loader>>(std::move(result));
  } else {
    result = Status::Cancelled("interrupted");  // drops a Loader opened anyway (no threads yet)
    pending.reset();
  }
  AbandonedOpens& abandoned = Abandoned();
  std::lock_guard<std::mutex> lock(abandoned.mutex);
  if (--abandoned.running == 0) abandoned.cv.notify_all();
}

// Loader::Open on a helper thread while this one waits with the GIL released, checking for
// signals every kSignalPoll: Python runs signal handlers only in a thread that comes back to it,
// so a blocking Open would defer Ctrl-C until the store's retries ran out. On a signal whose
// handler raises (KeyboardInterrupt), the open is stopped (io/filesystem.h RemoteStopScope),
// given kInterruptGrace to end, and the exception is raised; an open still waiting for a request
// already sent is left to end on its own (at that request's timeout).
std::unique_ptr<Loader> OpenInterruptibly(const LoaderOptions& options) {
  auto pending = std::make_shared<PendingOpen>(options);
  std::thread helper(RunOpen, pending);
  while (true) {
    bool done = false;
    {
      ReleaseGil release;
      std::unique_lock<std::mutex> lock(pending->mutex);
      done = pending->cv.wait_for(lock, kSignalPoll, [&] { return pending->done; });
    }
    if (done) break;
    if (PyErr_CheckSignals() == 0) continue;
    pending->stop.RequestStop();
    {
      ReleaseGil release;
      std::unique_lock<std::mutex> lock(pending->mutex);
      done = pending->cv.wait_for(lock, kInterruptGrace, [&] { return pending->done; });
      if (done) {
        lock.unlock();
        helper.join();
        pending->result = Status::Cancelled("interrupted");  // drops a Loader opened anyway
      } else {
        pending->abandoned = true;
        {
          std::lock_guard<std::mutex> count_lock(Abandoned().mutex);
          ++Abandoned().running;
        }
        helper.detach();
      }
    }
    throw nb::python_error();  // the exception the signal handler raised
  }
  {
    ReleaseGil release;
    helper.join();
  }
  ThrowIfError(pending->result.status());
  return std::move(pending->result).ValueUnsafe();
}

// The atexit hook's second half (after every loader is closed, before pyarrow finalises S3):
// remote requests still running stop and are waited for, as are interrupted opens.
bool StopRemoteRequestsAtExit() {
  ReleaseGil release;
  const auto start = std::chrono::steady_clock::now();
  bool idle = StopRemoteRequestsForExit();
  AbandonedOpens& abandoned = Abandoned();
  std::unique_lock<std::mutex> lock(abandoned.mutex);
  // Their requests are stopped now: what is left of them is quick.
  idle &= abandoned.cv.wait_until(lock, start + std::chrono::seconds(2),
                                  [&] { return abandoned.running == 0; });
  return idle;
}

// A stats struct (anything with ForEachField), a vector of them, or a plain value -> Python.
template <typename T>
nb::object StatsToPython(const T& value) {
  if constexpr (requires { value.ForEachField([](const char*, const auto&) {}); }) {
    nb::dict out;
    value.ForEachField(
        [&](const char* name, const auto& field) { out[name] = StatsToPython(field); });
    return out;
  } else if constexpr (requires {
                         value.begin();
                         value.end();
                       } &&
                       !std::is_same_v<T, std::string>) {
    nb::list out;
    for (const auto& item : value) out.append(StatsToPython(item));
    return out;
  } else {
    return nb::cast(value);
  }
}

}  // namespace

void RegisterLoader(nb::module_& m) {
  m.def("usable_cpus", &UsableCpus,
        "CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota.");
  m.def("_stop_remote_requests", &StopRemoteRequestsAtExit,
        "atexit: stops every remote request of the process and waits for those in flight "
        "(bounded by the stores' timeouts); True when none is left. Remote sources are unusable "
        "afterwards.");
  // The names of the keys a column adds in every batch (util/output_keys.h), for the arrays
  // Python makes itself (Petastorm fields decoded in the consumer).
  m.def("lengths_key", &LengthsKey, nb::arg("name"), nb::arg("level") = 0,
        "A padded list's lengths: '<name>_lengths', or '<name>_lengths_<level>' below the rows.");
  m.def("mask_key", &MaskKey, nb::arg("name"), nb::arg("level") = 0,
        "A null_mask validity mask: '<name>_mask', or '<name>_mask_<level>' below the rows.");
  m.def("valid_key", &ValidKey, nb::arg("name"),
        "on_error='zero' transforms' flags: '<name>_valid'.");
  nb::class_<ColumnInfo>(m, "ColumnInfo")
      .def_ro("name", &ColumnInfo::name)
      .def_ro("arrow_type", &ColumnInfo::arrow_type)
      .def_ro("kind", &ColumnInfo::kind)
      .def_prop_ro("dtype", [](const ColumnInfo& c) { return DTypeName(c.dtype); })
      .def_ro("inner_shape", &ColumnInfo::inner_shape)
      .def_ro("annotation", &ColumnInfo::annotation)
      .def_ro("mask_levels", &ColumnInfo::mask_levels)
      .def_ro("added_keys", &ColumnInfo::added_keys)
      .def(
          "_replace",
          // A copy with what Python changes after the engine (Petastorm's [H, W] gray images,
          // fields decoded in the consumer): loader.columns describes the batches it yields.
          [](const ColumnInfo& c, ColumnKind kind, const std::string& dtype,
             std::vector<int64_t> inner_shape, std::string annotation,
             std::optional<std::vector<std::string>> added_keys) {
            ColumnInfo out = c;
            if (!ParseDType(dtype, &out.dtype)) throw nb::value_error(dtype.c_str());
            out.kind = kind;
            out.inner_shape = std::move(inner_shape);
            out.annotation = std::move(annotation);
            if (added_keys) out.added_keys = std::move(*added_keys);
            return out;
          },
          nb::arg("kind"), nb::arg("dtype"), nb::arg("inner_shape"), nb::arg("annotation"),
          nb::arg("added_keys") = nb::none())
      .def("__repr__", [](nb::handle self) {
        // ColumnInfo(name='ts', kind='dense', dtype='float64', shape=(), arrow_type=...).
        return nb::str(
                   "ColumnInfo(name={!r}, kind={!r}, dtype={!r}, shape={!r}, "
                   "arrow_type={!r}, annotation={!r})")
            .format(self.attr("name"), self.attr("kind").attr("name"), self.attr("dtype"),
                    nb::steal(PySequence_Tuple(self.attr("inner_shape").ptr())),
                    self.attr("arrow_type"), self.attr("annotation"));
      });

  nb::class_<Loader>(m, "Engine")
      .def_static("open", &OpenInterruptibly, nb::arg("options"))
      .def(
          "start_epoch",
          [](Loader& self, int64_t epoch, int64_t start_batch, int64_t batch_step) {
            Blocking([&] {
              NoteIterating(/*done=*/false);  // this thread is about to iterate
              return self.StartEpoch(epoch, start_batch, batch_step);
            });
          },
          nb::arg("epoch"), nb::arg("start_batch"), nb::arg("batch_step") = 1)
      .def(
          "start_elastic_epoch",
          [](Loader& self, int64_t epoch, int old_world_size, int64_t old_batches,
             int64_t start_batch, int64_t batch_step) {
            return Blocking([&] {
              return self.StartElasticEpoch(epoch, old_world_size, old_batches, start_batch,
                                            batch_step);
            });
          },
          nb::arg("epoch"), nb::arg("old_world_size"), nb::arg("old_batches"),
          nb::arg("start_batch"), nb::arg("batch_step") = 1)
      // Returns (batch or None, done). Neither set means the timeout passed.
      .def(
          "next",
          [](Loader& self, int64_t timeout_ms) {
            std::shared_ptr<Batch> batch;
            bool done = false;
            Status status;
            {
              ReleaseGil release;
              status = self.NextFor(timeout_ms, &batch, &done);
              NoteIterating(done);
            }
            ThrowIfError(status);
            return std::make_tuple(batch, done);
          },
          nb::arg("timeout_ms"))
      .def("stop",
           [](Loader& self) {
             ReleaseGil release;
             self.Stop();
           })
      .def("close",
           [](Loader& self) {
             ReleaseGil release;
             self.Close();
           })
      .def("flush_cache",
           [](Loader& self) {
             ReleaseGil release;
             self.FlushCache();
           })
      .def_prop_ro("num_batches", &Loader::NumBatches)
      .def("num_batches_at", &Loader::NumBatchesAt, nb::arg("world_size"))
      .def_prop_ro("num_rows", &Loader::NumRows)
      .def_prop_ro("shuffle_window_rows", &Loader::ShuffleWindowRows)
      .def_prop_ro("dataset_rows", &Loader::DatasetRows)
      .def_prop_ro("num_files", &Loader::NumFiles)
      .def_prop_ro("num_row_groups", &Loader::NumRowGroups)
      .def_prop_ro("fingerprint", [](const Loader& self) { return self.Fingerprint(true); })
      .def_prop_ro("data_fingerprint", [](const Loader& self) { return self.Fingerprint(false); })
      .def_prop_ro("dataset_fingerprint", &Loader::DatasetFingerprint)
      .def("columns", &Loader::Columns)
      .def(
          "vocabulary",
          [](const Loader& self, const std::string& column) {
            auto vocabulary = self.Vocabulary(column);
            ThrowIfError(vocabulary.status());
            return *vocabulary;
          },
          nb::arg("column"))
      .def_prop_ro("seed", &Loader::Seed)
      .def("set_seed", &Loader::SetSeed, nb::arg("seed"))
      // A dict of plain values, shaped by stoker/stats.h (stages: a list in data-flow order).
      .def("stats", [](const Loader& self) { return StatsToPython(self.Stats()); });
}

}  // namespace stoker::python

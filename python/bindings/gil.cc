// Releasing the GIL around engine calls, safely at interpreter exit.
//
// At exit CPython ends any thread that retakes the GIL once finalization has begun (a daemon
// thread iterating a Loader, woken by the atexit hook that stops every loader) with
// pthread_exit(). Its forced unwind through nanobind's gil_scoped_release, whose destructor is
// noexcept, called std::terminate() ("terminate called without an active exception", exit code
// 134). And a thread frozen that way keeps its frames, hence the Loader, its options, columns
// and batches, alive for good: nanobind then reports them as leaked. So:
//  - ReleaseGil never lets that unwind escape: a thread that would be ended parks instead
//    (the process is exiting; the thread holds no lock);
//  - an atexit hook, which runs after stoker.loader's hook has stopped every loader, gives the
//    daemon threads that are iterating a loader (they will get LoaderClosedError at their next
//    step) up to 3 s to finish, with the GIL released, before finalization freezes them (1 s
//    was too short once in CI, on a loaded 2-core machine: the frozen thread's Loader leaked).
#include <cxxabi.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "register.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// CPython's thread identifiers (PyThread_get_thread_ident, threading's `ident`).
using ThreadIdent = unsigned long;  // NOLINT(google-runtime-int): CPython's own type

std::atomic<int> threads_in_engine{0};
// The thread that runs the atexit hooks and finalizes (the main thread); CPython never ends it.
std::atomic<ThreadIdent> finalizing_thread{0};
std::mutex consumers_mutex;
// Threads that started an epoch or took a batch and have not seen the end of an epoch since:
// they are iterating, or unwinding from an error (LoaderClosedError once the loaders are
// stopped), and may be daemon threads.
std::set<ThreadIdent> consumers;  // GUARDED_BY(consumers_mutex)

bool Finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

[[noreturn]] void ParkForever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
}

// Runs with the GIL held, as an atexit hook.
void LetEngineThreadsFinish() {
  finalizing_thread = PyThread_get_thread_ident();
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  // Threads still inside an engine call return to Python once they get the GIL.
  while (threads_in_engine.load() > 0 && Clock::now() < deadline) {
    nb::gil_scoped_release release;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::set<ThreadIdent> iterating;
  {
    std::lock_guard<std::mutex> lock(consumers_mutex);
    iterating.swap(consumers);
  }
  if (iterating.empty()) return;
  // Non-daemon threads were joined before atexit hooks run; daemon threads still iterating a
  // (now stopped) loader get to unwind and drop their references before being frozen.
  nb::object threading = nb::module_::import_("threading");
  nb::object current = threading.attr("current_thread")();
  // Threads Python did not start (_thread.start_new_thread, Ray's task threads) show up as
  // dummy threads, which cannot be joined: those are waited for until their frames are gone.
  nb::object dummy = threading.attr("_DummyThread");
  nb::object current_frames = nb::module_::import_("sys").attr("_current_frames");
  for (nb::handle thread : threading.attr("enumerate")()) {
    if (thread.is(current) || thread.attr("ident").is_none()) continue;
    if (!iterating.contains(nb::cast<ThreadIdent>(thread.attr("ident")))) continue;
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) break;
    if (!nb::isinstance(thread, dummy)) {
      thread.attr("join")(left);
      continue;
    }
    while (nb::cast<nb::dict>(current_frames()).contains(thread.attr("ident")) &&
           Clock::now() < deadline) {
      nb::gil_scoped_release release;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
}

}  // namespace

ReleaseGil::ReleaseGil() {
  threads_in_engine.fetch_add(1);
  state_ = PyEval_SaveThread();
}

ReleaseGil::~ReleaseGil() {
  // A thread asking for the GIL after finalization began would be ended by pthread_exit(),
  // except the finalizing thread itself (a generator closed at module teardown stops its loader).
  if (Finalizing() && PyThread_get_thread_ident() != finalizing_thread.load()) ParkForever();
  try {
    PyEval_RestoreThread(state_);
  } catch (abi::__forced_unwind&) {
    // Finalization began while this thread waited for the GIL: never rethrown (it would end
    // in std::terminate at this noexcept destructor); the handler never returns either.
    ParkForever();
  }
  threads_in_engine.fetch_sub(1);
}

bool PythonFinalizing() { return Finalizing(); }

void NoteIterating(bool done) {
  const ThreadIdent me = PyThread_get_thread_ident();
  std::lock_guard<std::mutex> lock(consumers_mutex);
  if (done) {
    consumers.erase(me);
  } else {
    consumers.insert(me);
  }
}

void RegisterExitHook(nb::module_& m) {
  finalizing_thread =
      nb::cast<ThreadIdent>(nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  m.def("_let_engine_threads_finish", &LetEngineThreadsFinish,
        "atexit hook: lets daemon threads that iterate a stopped engine finish (at most 3 s).");
  // Registered when the module is imported, so before stoker.loader's hook that stops every
  // loader: atexit runs hooks last-in first-out, so this one runs after it.
  nb::module_::import_("atexit").attr("register")(m.attr("_let_engine_threads_finish"));
}

}  // namespace stoker::python

#include "python/api/release_queue.hpp"

#include <cuda_runtime.h>

#include "gpu/check.hpp"

namespace foxhunt::python {

namespace {
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }
}  // namespace

ReleaseQueue::~ReleaseQueue() {
  try {
    poll(true);
  } catch (...) {
    // A destructor must not throw; the context is broken or the process is ending.
  }
  for (void* e : spare_) cudaEventDestroy(as_event(e));
}

void ReleaseQueue::push(std::function<void()> release) {
  void* e = nullptr;
  if (!spare_.empty()) {
    e = spare_.back();
    spare_.pop_back();
  } else {
    cudaEvent_t created = nullptr;
    FH_CHECK(cudaEventCreateWithFlags(&created, cudaEventDisableTiming));
    e = created;
  }
  entries_.push_back(Entry{e, std::move(release)});
}

void ReleaseQueue::mark(void* stream) {
  FH_EXPECT(!entries_.empty(), "ReleaseQueue::mark: nothing pushed");
  FH_CHECK(cudaEventRecord(as_event(entries_.back().done), static_cast<cudaStream_t>(stream)));
}

void ReleaseQueue::poll(bool wait) {
  std::size_t kept = 0;
  for (std::size_t k = 0; k < entries_.size(); ++k) {
    Entry& e = entries_[k];
    // An event never recorded reports complete.
    const cudaError_t r = wait ? cudaEventSynchronize(as_event(e.done)) : cudaEventQuery(as_event(e.done));
    if (r == cudaSuccess) {
      if (e.release) e.release();
      spare_.push_back(e.done);
    } else if (r == cudaErrorNotReady) {
      entries_[kept++] = std::move(e);
    } else {
      FH_CHECK(r);
    }
  }
  entries_.resize(kept);
}

}  // namespace foxhunt::python

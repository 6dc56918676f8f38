#include "comm/async.hpp"

#include <mpi.h>
#include <omp.h>

namespace st {

AsyncCommunicator::AsyncCommunicator(Communicator& inner) : inner_(inner) {
  int provided = 0;
  MPI_Query_thread(&provided);
  threaded_ = provided == MPI_THREAD_MULTIPLE;
  if (threaded_) worker_ = std::thread([this] { run(); });
}

AsyncCommunicator::~AsyncCommunicator() {
  if (!threaded_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  worker_.join();
}

Request AsyncCommunicator::submit(const char* op, std::uint64_t bytes, std::function<void()> work) {
  std::packaged_task<void()> task([this, op, bytes, work = std::move(work)] {
    // The counters are read by the training thread between steps; updates happen under the lock.
    std::lock_guard<std::mutex> lock(counter_mutex_);
    Timeline::Span span(timeline_, track_.c_str(), op, bytes);
    work();
  });
  Request request(task.get_future());
  if (!threaded_) {
    task();
    return request;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return request;
}

void AsyncCommunicator::run() {
  // A new thread's OpenMP team size defaults to every core of the host: the reductions inside
  // the collectives would start a team per rank and spin against the compute threads they are
  // meant to overlap with. The progress thread works alone.
  omp_set_num_threads(1);
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // an exception is stored in the request and rethrown by wait()
  }
}

LevelTraffic AsyncCommunicator::traffic() const {
  std::lock_guard<std::mutex> lock(counter_mutex_);
  return inner_.traffic();
}

}  // namespace st

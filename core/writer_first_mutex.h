// A shared mutex whose exclusive lockers go first: once a thread waits for it alone, new shared
// lockers wait behind it. std::shared_mutex on glibc prefers readers (pthread_rwlock's default),
// so a thread that wants it alone waits as long as shared holds keep overlapping, without bound.
// runtime.cu's capture fence is one: graph captures of many packed runs hold it shared and an
// allocation holds it alone, and an allocation starved behind a stream of captures stalled its run
// (kernels/dev/pack_notes.md). Meets the SharedMutex requirements, so std::shared_lock and
// std::unique_lock take it.
#pragma once
#include <condition_variable>
#include <mutex>

namespace pb {

class WriterFirstMutex {
 public:
  void lock() {
    std::unique_lock<std::mutex> l(m_);
    ++writers_waiting_;
    cv_.wait(l, [this] { return !writer_ && readers_ == 0; });
    --writers_waiting_;
    writer_ = true;
  }
  bool try_lock() {
    const std::lock_guard<std::mutex> l(m_);
    if (writer_ || readers_ > 0) return false;
    writer_ = true;
    return true;
  }
  void unlock() {
    {
      const std::lock_guard<std::mutex> l(m_);
      writer_ = false;
    }
    cv_.notify_all();
  }
  void lock_shared() {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [this] { return !writer_ && writers_waiting_ == 0; });
    ++readers_;
  }
  bool try_lock_shared() {
    const std::lock_guard<std::mutex> l(m_);
    if (writer_ || writers_waiting_ > 0) return false;
    ++readers_;
    return true;
  }
  void unlock_shared() {
    bool last;
    {
      const std::lock_guard<std::mutex> l(m_);
      last = --readers_ == 0;
    }
    if (last) cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int readers_ = 0;          // shared holders
  int writers_waiting_ = 0;  // threads in lock()
  bool writer_ = false;      // held alone
};

}  // namespace pb

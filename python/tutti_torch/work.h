// work.h: the c10d Work of one tutti_torch call: what it posted to tutti, when it completes
// (Work.wait with or without a timeout, the Future of getFuture), and the Tracker that follows a
// backend's Works so that the backend can wait for them and free them off tutti's threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <tutti.h>

namespace tutti_torch {

// One tutti post: fn(comm, &handle) posts asynchronously; fn(comm, nullptr) runs blocking.
using PostFn = std::function<tutti_status_t(tutti_comm_t *comm, tutti_work_t **work)>;

// Tracker follows a backend's posts from post to completion. It counts those still running, so
// that the backend can let them end before it destroys its communicator (as Gloo does), and
// parks the references that completions drop until a thread that may take the GIL frees them:
// dropping the last reference to a tensor whose Python object is gone decrefs that object,
// which takes the GIL, and tutti's worker thread must never wait for the GIL, since the
// interpreter may hold it while it waits for that very worker.
class Tracker {
  public:
    void begin();
    // end parks w (a completion's reference) and counts one post out; then adds one to
    // *parked (the Work's count of its references parked, which its wait looks at).
    void end(c10::intrusive_ptr<c10d::Work> w, std::atomic<int> *parked);
    // enter counts a call in while it runs in the caller's thread (blocking, or posting), so
    // that the backend does not destroy its communicator under it; false once closed.
    bool enter();
    // leave counts a call that entered out.
    void leave();
    // close refuses every later enter (the backend is shutting down).
    void close();
    // park keeps one more reference for drain to drop, and adds one to *parked.
    void park(c10::intrusive_ptr<c10d::Work> w, std::atomic<int> *parked);
    // drain frees the parked references here, in the calling thread.
    void drain();
    // await_parked waits, up to limit, until *parked (counted by end and park) reaches want.
    void await_parked(const std::atomic<int> *parked, int want, std::chrono::milliseconds limit);
    // wait_idle waits up to timeout for the running posts to end; false if some still run.
    bool wait_idle(std::chrono::milliseconds timeout);

  private:
    std::mutex mu_;
    std::condition_variable idle_;
    std::condition_variable parked_cv_; // end and park add to a Work's count
    size_t running_ = 0;
    bool closed_ = false;
    std::vector<c10::intrusive_ptr<c10d::Work>> parked_;
};

// Work is one c10d call. The backend fills finalize_ and keep_, then either ran the call
// blocking and calls complete_now, or posts it (post, once per tutti operation) and calls arm;
// the Work completes when every post has. A coalesced Work collects the calls made between
// startCoalescing and endCoalescing and is armed by endCoalescing.
class Work : public c10d::Work {
  public:
    Work(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs,
         std::shared_ptr<Tracker> tracker);

    const std::string &name() const { return name_; }

    // Run in order on success before the Work counts as complete (copies into the caller's
    // tensors); they run on tutti's worker thread, or in the caller's for a blocking call.
    std::vector<std::function<void()>> finalize_;
    // Buffers tutti reads or writes: kept until the Work is freed (never on tutti's thread).
    std::vector<at::Tensor> keep_;
    // The outputs, appended to by coalesced calls.
    std::vector<at::Tensor> outputs_;
    // Where set, the Future's value instead: a list of outputs per rank.
    std::optional<std::vector<std::vector<at::Tensor>>> nested_outputs_;
    // Added to a mismatch's text (Call::hint; none for a coalesced Work).
    std::string hint_;

    // post runs fn with a handle on comm and wires its completion here. It throws, with
    // tutti's text, when tutti refuses the post (nothing was posted then).
    void post(tutti_comm_t *comm, const PostFn &fn);
    // arm says every post is made: the Work completes once they have (or now, if they have).
    // fail, before arm, makes the Work complete with ex whatever the posts do.
    void arm();
    void fail(std::exception_ptr ex);
    // complete_now completes a call that ran blocking in this thread: finalize_, then done.
    void complete_now();
    // finalize runs finalize_ (copies into the user's tensors), and returns what it threw.
    std::exception_ptr finalize();

    bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
    std::vector<at::Tensor> result() override { return outputs_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
    int sourceRank() const override;

  private:
    static void on_complete(tutti_work_t *h, void *arg);
    void count_down();
    void done(std::exception_ptr ex);
    void complete_future(const c10::intrusive_ptr<c10::ivalue::Future> &f,
                         std::exception_ptr ex);

    std::string name_;
    std::shared_ptr<Tracker> tracker_;
    std::atomic<int> pending_{1}; // posts in flight, plus one until arm()
    std::atomic<bool> armed_{false};
    std::atomic<bool> done_{false}; // completed_, readable without the lock (wait's spin)
    std::mutex err_mu_;
    std::exception_ptr error_; // the first failure of a post (under err_mu_)
    // Under c10d::Work::mutex_: the Future, made on the first getFuture, and whether it has
    // been (or is being) completed.
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    bool future_done_ = false;
    // Under mutex_ too: the outcome, once done() has decided that no Future waits for it (the
    // Work's own completion, finish, comes a moment later).
    std::exception_ptr outcome_;
    bool outcome_set_ = false;
    // References to this Work that completions hand to the Tracker: one per post, and one
    // more where a Future is completed. Work.wait frees them once all are there, so that the
    // tensors go when the user drops the Work (they stayed until the group's next call).
    int posts_ = 0;                 // the caller's thread, before arm
    int future_park_ = 0;           // under mutex_: 1 where done() hands the Future on
    std::atomic<int> parked_{0};
    // The sender of the receive(s) this Work posted, from tutti_work_source at completion: -1
    // none (no receive, or it failed), -2 several receives from different ranks.
    std::atomic<int> source_{-1};
};

} // namespace tutti_torch

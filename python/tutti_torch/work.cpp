// work.cpp: the Work of one call, its completion and Future, and the Tracker (see work.h).
#include "work.h"

#include <deque>
#include <stdexcept>
#include <thread>

#include "errors.h"

namespace tutti_torch {

// The Work whose Future this thread is completing (a Completer thread, while the Future's
// callbacks run): that Work completes only after them, so its wait there would wait for itself.
static thread_local const Work *completing_future_of = nullptr;

// ---- Tracker ----

void Tracker::begin()
{
    std::lock_guard<std::mutex> g(mu_);
    running_++;
}

void Tracker::end(c10::intrusive_ptr<c10d::Work> w, std::atomic<int> *parked)
{
    std::lock_guard<std::mutex> g(mu_);
    parked_.push_back(std::move(w)); // keeps *parked's Work alive while the lock is held
    parked->fetch_add(1, std::memory_order_release);
    parked_cv_.notify_all();
    if (--running_ == 0)
        idle_.notify_all();
}

bool Tracker::enter()
{
    std::lock_guard<std::mutex> g(mu_);
    if (closed_)
        return false;
    running_++;
    return true;
}

void Tracker::leave()
{
    std::lock_guard<std::mutex> g(mu_);
    if (--running_ == 0)
        idle_.notify_all();
}

void Tracker::close()
{
    std::lock_guard<std::mutex> g(mu_);
    closed_ = true;
}

void Tracker::park(c10::intrusive_ptr<c10d::Work> w, std::atomic<int> *parked)
{
    std::lock_guard<std::mutex> g(mu_);
    parked_.push_back(std::move(w));
    parked->fetch_add(1, std::memory_order_release);
    parked_cv_.notify_all();
}

void Tracker::await_parked(const std::atomic<int> *parked, int want,
                           std::chrono::milliseconds limit)
{
    std::unique_lock<std::mutex> lock(mu_);
    parked_cv_.wait_for(lock, limit,
                        [&] { return parked->load(std::memory_order_acquire) >= want; });
}

void Tracker::drain()
{
    std::vector<c10::intrusive_ptr<c10d::Work>> gone;
    {
        std::lock_guard<std::mutex> g(mu_);
        gone.swap(parked_);
    }
}

bool Tracker::wait_idle(std::chrono::milliseconds timeout)
{
    std::unique_lock<std::mutex> lock(mu_);
    return idle_.wait_for(lock, timeout, [&] { return running_ == 0; });
}

// ---- Completer ----

// Completer completes the Futures that someone holds (and may have hung callbacks on) off
// tutti's worker threads, on threads of its own, one per completion in flight: a callback may
// wait for another operation of the group (PowerSGD's hooks do), which needs tutti's worker
// free, and a Completer thread free to complete that operation's Future. Idle threads stay a
// few seconds for the next completion, then leave. One per process, never destroyed.
class Completer {
  public:
    static Completer &get()
    {
        static Completer *c = new Completer(); // leaked: its threads may outlive static teardown
        return *c;
    }

    void run(std::function<void()> fn)
    {
        std::unique_lock<std::mutex> lock(mu_);
        tasks_.push_back(std::move(fn));
        if (tasks_.size() > idle_)
            std::thread([this] { loop(); }).detach(); // every queued task gets a thread
        else
            cv_.notify_one();
    }

  private:
    void loop()
    {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            if (tasks_.empty()) {
                idle_++;
                bool got = cv_.wait_for(lock, std::chrono::seconds(5),
                                        [&] { return !tasks_.empty(); });
                idle_--;
                if (!got)
                    return;
            }
            std::function<void()> fn = std::move(tasks_.front());
            tasks_.pop_front();
            lock.unlock();
            fn();
            fn = nullptr;
            lock.lock();
        }
    }

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> tasks_;
    size_t idle_ = 0;
};

// ---- Work ----

Work::Work(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs,
           std::shared_ptr<Tracker> tracker)
    : c10d::Work(rank, type), outputs_(std::move(outputs)), name_(std::move(name)),
      tracker_(std::move(tracker))
{
}

void Work::post(tutti_comm_t *comm, const PostFn &fn)
{
    tutti_work_t *h = nullptr;
    tutti_status_t st = fn(comm, &h);
    if (st < 0 || h == nullptr)
        throw std::runtime_error(prefixed(name_, with_hint(st, status_text(st, comm), hint_)));
    pending_.fetch_add(1, std::memory_order_relaxed);
    posts_++;
    c10::raw::intrusive_ptr::incref(this); // the completion's reference
    tracker_->begin();
    if (tutti_work_on_complete(h, &Work::on_complete, this) != TUTTI_OK) {
        // Only a handle that has a callback already is refused, never a fresh one; should it
        // happen all the same, complete here rather than leak or hang.
        tutti_work_wait(h, -1.0);
        on_complete(h, this);
    }
}

void Work::on_complete(tutti_work_t *h, void *arg)
{
    // Adopt the reference post() took; the Tracker keeps it at the end.
    auto self = c10::intrusive_ptr<Work>::reclaim(static_cast<Work *>(arg));
    tutti_status_t st = tutti_work_status(h);
    int src = tutti_work_source(h); // >= 0 only for a receive that succeeded
    if (src >= 0) {
        int none = -1;
        if (!self->source_.compare_exchange_strong(none, src) && none != src)
            self->source_.store(-2);
    }
    if (st != TUTTI_OK) {
        std::string text = tutti_work_error(h);
        text = text.empty() ? tutti_strerror(st) : text + " (" + tutti_strerror(st) + ")";
        std::lock_guard<std::mutex> g(self->err_mu_);
        if (!self->error_)
            self->error_ = std::make_exception_ptr(
                std::runtime_error(prefixed(self->name_, with_hint(st, text, self->hint_))));
    }
    tutti_work_free(h); // done already: frees at once, also from inside the callback
    self->count_down();
    std::shared_ptr<Tracker> t = self->tracker_;
    std::atomic<int> *parked = &self->parked_;
    t->end(std::move(self), parked);
}

void Work::fail(std::exception_ptr ex)
{
    std::lock_guard<std::mutex> g(err_mu_);
    if (!error_)
        error_ = std::move(ex);
}

void Work::arm()
{
    armed_.store(true, std::memory_order_release);
    count_down();
}

void Work::count_down()
{
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1)
        return;
    std::exception_ptr ex;
    {
        std::lock_guard<std::mutex> g(err_mu_);
        ex = error_;
    }
    if (!ex)
        ex = finalize();
    done(ex);
}

std::exception_ptr Work::finalize()
{
    try {
        for (const auto &f : finalize_)
            f();
    } catch (const c10::Error &e) {
        // torch's own words (an output that overlaps itself, as expand() makes) without the
        // call they came from: name it, and say the peers' part went through.
        return std::make_exception_ptr(std::runtime_error(prefixed(
            name_, std::string("the call completed, but its result could not be copied into "
                               "the output tensor: ") +
                       e.what_without_backtrace())));
    } catch (...) {
        return std::current_exception();
    }
    return nullptr;
}

void Work::complete_now()
{
    armed_.store(true, std::memory_order_release);
    pending_.store(0, std::memory_order_relaxed);
    done(finalize());
}

// done completes the Work's Future, if someone holds one already, and then the Work (waking
// Work.wait), as Gloo does: once Work.wait returns, the Future is complete and its callbacks
// have run. With a Future, both happen on a Completer thread, since its callbacks may wait for
// other operations. A Future asked for later is made complete at once (getFuture).
void Work::done(std::exception_ptr ex)
{
    c10::intrusive_ptr<c10::ivalue::Future> f;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (future_ && !future_done_) {
            future_done_ = true;
            future_park_ = 1;
            f = future_;
        } else {
            outcome_ = ex; // for a getFuture that comes before finish below
            outcome_set_ = true;
        }
    }
    if (!f) {
        finish(ex);
        done_.store(true, std::memory_order_release);
        return;
    }
    auto self = c10::intrusive_ptr<Work>::reclaim_copy(this);
    Completer::get().run([self, f, ex] {
        completing_future_of = self.get();
        self->complete_future(f, ex);
        completing_future_of = nullptr;
        self->finish(ex);
        self->done_.store(true, std::memory_order_release);
        std::shared_ptr<Tracker> t = self->tracker_;
        std::atomic<int> *parked = &self->parked_;
        t->park(self, parked); // the last reference goes where the GIL may be taken
    });
}

void Work::complete_future(const c10::intrusive_ptr<c10::ivalue::Future> &f,
                           std::exception_ptr ex)
{
    if (ex)
        f->setError(ex);
    else if (nested_outputs_)
        f->markCompleted(c10::IValue(*nested_outputs_));
    else
        f->markCompleted(c10::IValue(outputs_));
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture()
{
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
        c10::TypePtr list = c10::ListType::create(c10::TensorType::get());
        future_ = c10::make_intrusive<c10::ivalue::Future>(
            nested_outputs_ ? c10::TypePtr(c10::ListType::create(list)) : list);
        if (outcome_set_) { // nothing hangs on a Future made just now: complete it here
            future_done_ = true;
            complete_future(future_, outcome_);
        }
    }
    return future_;
}

bool Work::wait(std::chrono::milliseconds timeout)
{
    if (!armed_.load(std::memory_order_acquire))
        refuse(name_, "waited for inside a coalescing block, before its operations were "
                      "posted: leave the block (endCoalescing) first, then wait");
    if (completing_future_of == this)
        refuse(name_, "Work.wait() in a callback of this Work's own Future: as with Gloo, the "
                      "Future completes before the Work, so this would wait for itself; the "
                      "callback's Future argument holds the result (fut.value())");
    // As tutti_work_wait does: operations often end within microseconds, and waking from the
    // condition variable costs several; yielding hands the core to the worker doing the work.
    auto start = std::chrono::steady_clock::now();
    auto spin = std::chrono::microseconds(200);
    if (timeout != kNoTimeout && timeout < spin)
        spin = timeout;
    while (!done_.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() - start < spin)
        std::this_thread::yield();
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
        // tutti's own deadline (the group's timeout) ends every operation.
        cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
        if (future_done_) // the operation has ended: its Future's callbacks are running
            throw std::runtime_error(prefixed(
                name_, "its operation ended, but its Future's callbacks had not returned after "
                       "the " + std::to_string(timeout.count()) +
                           " ms Work.wait was given (the Work completes after them, as with "
                           "Gloo); wait again"));
        throw std::runtime_error(prefixed(
            name_, "not complete after the " + std::to_string(timeout.count()) +
                       " ms Work.wait was given; it goes on (wait again), and fails by itself at "
                       "the process group's timeout"));
    }
    std::exception_ptr ex = exception_;
    const int want = posts_ + future_park_;
    lock.unlock();
    // The completions hand their references to the Tracker a moment after the Work is complete:
    // wait for that (a few instructions, or a descheduling; bounded all the same), then free
    // them here, a thread that may take the GIL.
    tracker_->await_parked(&parked_, want, std::chrono::seconds(10));
    tracker_->drain();
    if (ex)
        std::rethrow_exception(ex);
    return true;
}

// sourceRank is the rank a completed receive got its message from (c10d's contract: Gloo's
// receives answer it too, with or without a named source); dist.recv without src returns it.
int Work::sourceRank() const
{
    bool completed;
    {
        // completed_, not done_: Work.wait returns once completed_ is set, a moment before done_
        std::lock_guard<std::mutex> lock(mutex_);
        completed = completed_;
    }
    if (!completed)
        refuse(name_, "sourceRank() names the sender once the receive has completed: wait for "
                      "it first");
    int s = source_.load(std::memory_order_acquire);
    if (s == -2)
        refuse(name_, "sourceRank(): this Work is a coalesced block whose receives came from "
                      "several ranks; post a receive from any source outside the block to learn "
                      "its sender");
    if (s < 0)
        refuse(name_, "sourceRank() names the sender of a receive that succeeded; this Work is "
                      "not one (a send, a collective, or a receive that failed)");
    return s;
}

} // namespace tutti_torch

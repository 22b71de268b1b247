// process_group.cpp: ProcessGroupTutti, a c10d::ProcessGroup for torch 1.13 that is a thin layer
// over tutti's C API (tutti communicators made through the group's c10d Store, one tutti work
// handle per call), and the pybind11 module tutti_torch._C that builds it.
//
// Every call checks its tensors (CPU, strided, one per call where c10d says one, a dtype tutti
// reduces), posts one asynchronous tutti operation and returns a TuttiWork at once. tutti's
// completion callback, on tutti's worker thread, copies results where the caller wants them (for
// non-contiguous tensors and tensor lists) and completes the Work; the Work's Future completes
// there too, or on a Completer thread once someone holds it (its callbacks may wait for other
// operations). Collectives that only move data (broadcast, allgather, alltoall, gather,
// scatter, send, recv) move bytes, so they take every dtype; reductions take the dtypes tutti
// reduces and refuse the rest. gather and scatter, which tutti lacks, are alltoallv calls.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <tutti.h>

namespace tutti_torch {

namespace py = pybind11;

// Error texts start with this, so a user sees which backend spoke.
static std::string prefixed(const std::string &op, const std::string &msg)
{
    return "tutti " + op + ": " + msg;
}

[[noreturn]] static void refuse(const std::string &op, const std::string &msg)
{
    throw std::runtime_error(prefixed(op, msg));
}

// The text of a post that tutti refused: the thread's last error is the most specific.
static std::string post_error(tutti_status_t st, const tutti_comm_t *comm)
{
    std::string text = tutti_last_error();
    if (text.empty() && comm != nullptr)
        text = tutti_comm_last_error(comm);
    if (text.empty())
        text = tutti_strerror(st);
    return text + " (" + tutti_strerror(st) + ")";
}

// ---- dtypes, ops, tensor checks ----

static bool dtype_of(at::ScalarType t, tutti_dtype_t *out)
{
    switch (t) {
    case at::kChar: *out = TUTTI_INT8; return true;
    case at::kByte: *out = TUTTI_UINT8; return true;
    case at::kInt: *out = TUTTI_INT32; return true;
    case at::kLong: *out = TUTTI_INT64; return true;
    case at::kHalf: *out = TUTTI_FLOAT16; return true;
    case at::kBFloat16: *out = TUTTI_BFLOAT16; return true;
    case at::kFloat: *out = TUTTI_FLOAT32; return true;
    case at::kDouble: *out = TUTTI_FLOAT64; return true;
    default: return false;
    }
}

// reduce_dtype is the tutti dtype a reduction of t runs in, or a clear refusal.
static tutti_dtype_t reduce_dtype(const std::string &op, const at::Tensor &t)
{
    tutti_dtype_t d;
    if (!dtype_of(t.scalar_type(), &d))
        refuse(op, std::string("dtype ") + c10::toString(t.scalar_type()) +
                       " cannot be reduced by tutti; it reduces int8, uint8, int32, int64, "
                       "float16, bfloat16, float32 and float64: convert the tensor first");
    return d;
}

static tutti_op_t op_of(const std::string &op, const c10d::ReduceOp &rop, const at::Tensor &t)
{
    switch (rop.op_) {
    case c10d::ReduceOp::SUM: return TUTTI_SUM;
    case c10d::ReduceOp::AVG: return TUTTI_AVG;
    case c10d::ReduceOp::PRODUCT: return TUTTI_PROD;
    case c10d::ReduceOp::MIN: return TUTTI_MIN;
    case c10d::ReduceOp::MAX: return TUTTI_MAX;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
        if (at::isFloatingType(t.scalar_type()))
            refuse(op, std::string("bitwise reductions (BAND, BOR, BXOR) need an integer tensor, "
                                   "not ") + c10::toString(t.scalar_type()));
        return rop.op_ == c10d::ReduceOp::BAND ? TUTTI_BAND
               : rop.op_ == c10d::ReduceOp::BOR ? TUTTI_BOR
                                                 : TUTTI_BXOR;
    default:
        refuse(op, "ReduceOp " + std::to_string(static_cast<int>(rop.op_)) +
                       " is not supported (tutti has SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, "
                       "BXOR; PREMUL_SUM is NCCL's)");
    }
}

static void check_tensor(const std::string &op, const at::Tensor &t)
{
    if (!t.defined())
        refuse(op, "got an undefined tensor");
    if (!t.device().is_cpu())
        refuse(op, "tensors must be on the CPU, got one on " + t.device().str() +
                       "; tutti is a CPU backend");
    if (t.layout() != at::kStrided)
        refuse(op, "only dense (strided) tensors are supported, not sparse or other layouts");
}

// check_one enforces c10d's single-device contract: one tensor per call.
static const at::Tensor &check_one(const std::string &op, const std::vector<at::Tensor> &ts)
{
    if (ts.size() != 1)
        refuse(op, "takes exactly one tensor per call (c10d's one-device-per-process contract), "
                   "got " + std::to_string(ts.size()) +
                       (op.rfind("allreduce", 0) == 0 ? "; use allreduce_coalesced for several"
                                                      : ""));
    check_tensor(op, ts[0]);
    return ts[0];
}

static size_t nbytes(const at::Tensor &t)
{
    return static_cast<size_t>(t.numel()) * t.element_size();
}

// A buffer tutti works on: the caller's tensor itself when it is contiguous, else a contiguous
// copy whose result is copied back (into) at completion.
struct Buf {
    at::Tensor user, work;
    Buf() = default;
    Buf(const at::Tensor &t, bool read) : user(t)
    {
        work = t.is_contiguous() ? t : (read ? t.contiguous() : at::empty(t.sizes(), t.options()));
    }
    void *ptr() const { return work.data_ptr(); }
    bool copied() const { return !work.is_same(user); }
    void copy_back() const
    {
        if (copied())
            user.copy_(work);
    }
};

// Copy t's bytes to dst (packed, row-major), and bytes from src into t.
static void bytes_out(const at::Tensor &t, uint8_t *dst)
{
    size_t n = nbytes(t);
    if (n == 0)
        return;
    at::Tensor c = t.contiguous();
    std::memcpy(dst, c.data_ptr(), n);
}

static void bytes_in(const at::Tensor &t, const uint8_t *src)
{
    size_t n = nbytes(t);
    if (n == 0)
        return;
    if (t.is_contiguous()) {
        std::memcpy(t.data_ptr(), src, n);
    } else {
        at::Tensor view = at::from_blob(const_cast<uint8_t *>(src), t.sizes(),
                                        t.options().device(at::kCPU));
        t.copy_(view);
    }
}

// adjacent says whether ts are contiguous and lie back to back in memory, in order (views of one
// tensor, as torch.chunk makes): then tutti can read or write them in place.
static bool adjacent(const std::vector<at::Tensor> &ts)
{
    if (ts.empty())
        return false;
    const uint8_t *next = nullptr;
    for (const auto &t : ts) {
        if (!t.is_contiguous())
            return false;
        const uint8_t *p = static_cast<const uint8_t *>(t.data_ptr());
        if (next != nullptr && p != next)
            return false;
        next = p + nbytes(t);
    }
    return true;
}

static at::Tensor byte_buffer(size_t n)
{
    return at::empty({static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kByte));
}

static int64_t ms_of(std::chrono::milliseconds d)
{
    return static_cast<int64_t>(d.count());
}

// ---- the work ----

// Tracker follows a group's Works from post to free. It counts those still running, so that
// ~ProcessGroupTutti can let them end first (as Gloo does), and parks those whose completion
// callback has run until a thread that may take the GIL frees them: dropping the last reference
// to a tensor whose Python object is gone already decrefs that object, which takes the GIL, and
// tutti's worker thread must never wait for the GIL, since the interpreter may hold it while it
// waits for that very worker (~ProcessGroupTutti, with the GIL, joins it).
class Tracker {
  public:
    void begin()
    {
        std::lock_guard<std::mutex> g(mu_);
        running_++;
    }

    // end parks w (which has completed) and counts it out.
    void end(c10::intrusive_ptr<c10d::Work> w)
    {
        std::lock_guard<std::mutex> g(mu_);
        parked_.push_back(std::move(w));
        if (--running_ == 0)
            idle_.notify_all();
    }

    // park keeps one more reference of a completed Work (a Completer's) for drain to drop.
    void park(c10::intrusive_ptr<c10d::Work> w)
    {
        std::lock_guard<std::mutex> g(mu_);
        parked_.push_back(std::move(w));
    }

    // drain frees the parked works here, in the calling thread, outside the lock.
    void drain()
    {
        std::vector<c10::intrusive_ptr<c10d::Work>> gone;
        {
            std::lock_guard<std::mutex> g(mu_);
            gone.swap(parked_);
        }
    }

    // wait_idle waits up to timeout for the running Works to end; false if some still run.
    bool wait_idle(std::chrono::milliseconds timeout)
    {
        std::unique_lock<std::mutex> lock(mu_);
        return idle_.wait_for(lock, timeout, [&] { return running_ == 0; });
    }

  private:
    std::mutex mu_;
    std::condition_variable idle_;
    size_t running_ = 0;
    std::vector<c10::intrusive_ptr<c10d::Work>> parked_;
};

// Completer runs the completion of Futures that someone holds (and may have hung callbacks on)
// off tutti's worker threads, on threads of its own, one per completion in flight: a callback
// may wait for another operation of the group (PowerSGD's hooks do), which needs tutti's
// worker free, and a Completer thread free to complete that operation's Future. Idle threads
// stay a few seconds for the next completion, then leave. One per process, never destroyed.
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
        if (tasks_.size() > idle_) {
            std::thread([this] { loop(); }).detach(); // every queued task gets its own thread
        } else {
            cv_.notify_one();
        }
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

class TuttiWork : public c10d::Work {
  public:
    TuttiWork(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs,
              std::shared_ptr<Tracker> tracker)
        : c10d::Work(rank, type), name_(std::move(name)), outputs_(std::move(outputs)),
          future_(c10::make_intrusive<c10::ivalue::Future>(
              c10::ListType::create(c10::TensorType::get()))),
          tracker_(std::move(tracker))
    {
    }

    ~TuttiWork() override
    {
        // The callback holds a reference until it has run, so no handle is left here unless
        // the post failed half-way.
        tutti_work_free(handle_);
    }

    bool wait(std::chrono::milliseconds timeout) override
    {
        std::unique_lock<std::mutex> lock(mutex_);
        if (timeout == kNoTimeout) {
            // tutti's own deadline (the group's timeout) ends every operation.
            cv_.wait(lock, [&] { return completed_; });
        } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
            throw std::runtime_error(prefixed(
                name_, "not complete after the " + std::to_string(ms_of(timeout)) +
                           " ms Work.wait was given; it goes on (wait again), and fails by itself "
                           "at the process group's timeout"));
        }
        std::exception_ptr ex = exception_;
        lock.unlock();
        tracker_->drain(); // a thread that may take the GIL: free what completions parked
        if (ex)
            std::rethrow_exception(ex);
        return true;
    }

    std::vector<at::Tensor> result() override { return outputs_; }

    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override
    {
        std::lock_guard<std::mutex> lock(mutex_);
        future_out_ = true;
        return future_;
    }

    // What the completion callback does on success before the Work counts as complete.
    std::function<void()> finalize_;
    // Buffers tutti reads or writes; kept, like finalize_'s tensors, until the Work is freed
    // (never on tutti's worker thread: see Tracker).
    std::vector<at::Tensor> keep_;

    // post runs fn (one tutti post with a handle) and wires its completion to this Work.
    void post(tutti_comm_t *comm, const std::function<tutti_status_t(tutti_work_t **)> &fn)
    {
        tutti_work_t *h = nullptr;
        tutti_status_t st = fn(&h);
        if (st < 0 || h == nullptr)
            throw std::runtime_error(prefixed(name_, post_error(st, comm)));
        handle_ = h;
        c10::raw::intrusive_ptr::incref(this); // the callback's reference
        tracker_->begin();
        st = tutti_work_on_complete(h, &TuttiWork::on_complete, this);
        if (st != TUTTI_OK) { // cannot happen for a fresh handle; do not leak or hang
            tracker_->end(c10::intrusive_ptr<TuttiWork>::reclaim(this));
            throw std::runtime_error(prefixed(name_, post_error(st, comm)));
        }
    }

  private:
    static void on_complete(tutti_work_t *h, void *arg)
    {
        // Adopt the reference post() took; the Tracker keeps it at the end.
        auto self = c10::intrusive_ptr<TuttiWork>::reclaim(static_cast<TuttiWork *>(arg));
        std::exception_ptr ex;
        tutti_status_t st = tutti_work_status(h);
        if (st != TUTTI_OK) {
            std::string text = tutti_work_error(h);
            if (text.empty())
                text = tutti_strerror(st);
            ex = std::make_exception_ptr(std::runtime_error(
                prefixed(self->name_, text + " (" + tutti_strerror(st) + ")")));
        } else if (self->finalize_) {
            try {
                self->finalize_();
            } catch (...) {
                ex = std::current_exception();
            }
        }
        self->handle_ = nullptr;
        tutti_work_free(h); // done already: frees at once, also from inside the callback
        self->done(ex);
        std::shared_ptr<Tracker> t = self->tracker_;
        t->end(std::move(self));
    }

    // done completes the Work (waking Work.wait), then its Future: right here while nobody has
    // asked for it (no callbacks can hang on it yet: getFuture takes the same lock), else on a
    // Completer thread, since its callbacks may wait for other operations.
    void done(std::exception_ptr ex)
    {
        finish(ex);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!future_out_) {
                complete_future(ex);
                return;
            }
        }
        c10::intrusive_ptr<TuttiWork> self =
            c10::intrusive_ptr<TuttiWork>::reclaim_copy(this);
        Completer::get().run([self, ex] {
            self->complete_future(ex);
            std::shared_ptr<Tracker> g = self->tracker_;
            g->park(self); // the last reference goes where the GIL may be taken
        });
    }

    void complete_future(std::exception_ptr ex)
    {
        if (ex)
            future_->setError(ex);
        else
            future_->markCompleted(c10::IValue(outputs_));
    }

    std::string name_;
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    tutti_work_t *handle_ = nullptr;
    std::shared_ptr<Tracker> tracker_;
    bool future_out_ = false; // getFuture was called (under mutex_)
};

// ---- bootstrap through the c10d Store ----

struct StoreOob {
    c10d::Store *store;
    std::string prefix; // keeps the keys of this group's communicators apart
    std::string error;  // the Store's own text when it failed, for the message
};

static int oob_put(void *ctx, const char *key, const void *value, size_t len)
{
    auto *o = static_cast<StoreOob *>(ctx);
    try {
        const uint8_t *p = static_cast<const uint8_t *>(value);
        o->store->set(o->prefix + key, std::vector<uint8_t>(p, p + len));
        return 0;
    } catch (const std::exception &e) {
        o->error = e.what();
        return -1;
    }
}

// oob_get polls Store::check (backing off from 50 us to 10 ms) rather than calling Store::wait,
// whose timeout is an exception that differs by store and cannot be told from a broken store;
// tutti asks in short slices anyway, and timeout_s == 0 asks once.
static int oob_get(void *ctx, const char *key, void *buf, size_t cap, size_t *len,
                   double timeout_s)
{
    auto *o = static_cast<StoreOob *>(ctx);
    try {
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s > 0 ? timeout_s : 0));
        auto pause = std::chrono::microseconds(50);
        std::vector<std::string> keys{o->prefix + key};
        while (!o->store->check(keys)) {
            auto now = std::chrono::steady_clock::now();
            if (now >= deadline)
                return 1;
            std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
                pause, deadline - now));
            pause = std::min(pause * 2, std::chrono::microseconds(10000));
        }
        std::vector<uint8_t> v = o->store->get(keys[0]);
        *len = v.size();
        std::memcpy(buf, v.data(), std::min(cap, v.size()));
        return 0;
    } catch (const std::exception &e) {
        o->error = e.what();
        return -1;
    }
}

// make_comm creates one tutti communicator of the group through the Store, its keys under
// prefix. inline_max0: every asynchronous post goes to the communicator's worker and never runs
// in the caller's thread, so that a post returns at once and Work.wait's timeout applies.
static tutti_comm_t *make_comm(c10d::Store *store, const std::string &prefix, int rank, int size,
                               std::chrono::milliseconds timeout, bool inline_max0)
{
    StoreOob o{store, prefix, ""};
    tutti_oob_t oob{&o, oob_put, oob_get};
    tutti_comm_config_t cfg = TUTTI_COMM_CONFIG_INIT;
    cfg.timeout_s = timeout.count() > 0 ? static_cast<double>(timeout.count()) / 1000.0 : 0;
    if (inline_max0)
        cfg.inline_max = -1; /* never */
    tutti_comm_t *comm = nullptr;
    tutti_status_t st = tutti_comm_init(rank, size, &oob, &cfg, &comm);
    if (st != TUTTI_OK) {
        std::string msg = post_error(st, nullptr);
        if (!o.error.empty())
            msg += "; the c10d Store said: " + o.error;
        refuse("init", "rank " + std::to_string(rank) + " of " + std::to_string(size) + ": " +
                           msg);
    }
    return comm;
}

// ---- the process group ----

class ProcessGroupTutti : public c10d::ProcessGroup {
  public:
    // Three communicators: one for the collectives, and for point-to-point one per direction
    // (lower to higher rank, higher to lower). tutti runs a communicator's operations one after
    // the other, so on a single communicator an irecv posted before the isend of an exchange
    // would wait for a send queued behind it on the peer; split by direction, each rank's sends
    // and receives with one peer run independently. No post runs in the caller's thread (a
    // small one on an idle communicator would, and block there until the peers arrive), so
    // every call returns at once and Work.wait's timeout applies; a TUTTI_INLINE_MAX that the
    // user sets is kept for the collectives (lower latency for small ones, which then block).
    ProcessGroupTutti(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                      std::chrono::milliseconds timeout)
        : c10d::ProcessGroup(rank, size), timeout_(timeout)
    {
        if (!store)
            refuse("init", "the Store is None");
        comm_ = make_comm(store.get(), "tutti/coll/", rank, size, timeout,
                          getenv("TUTTI_INLINE_MAX") == nullptr);
        try {
            up_ = make_comm(store.get(), "tutti/p2p-up/", rank, size, timeout, true);
            down_ = make_comm(store.get(), "tutti/p2p-down/", rank, size, timeout, true);
        } catch (...) {
            destroy();
            throw;
        }
        init();
    }

    // Operations still running end first, as in Gloo: a peer may be running one that this rank
    // has only queued, which tutti_comm_destroy would fail here and leave that peer waiting for
    // it until the timeout. Then the communicators go (their workers joined: every callback has
    // run), then the Works parked by the callbacks.
    ~ProcessGroupTutti() override
    {
        tracker_->wait_idle(timeout_.count() > 0 ? timeout_ : std::chrono::milliseconds(300000));
        destroy();
        tracker_->drain();
    }

    const std::string getBackendName() const override { return "tutti"; }

    tutti_comm_t *comm() const { return comm_; }
    std::chrono::milliseconds timeout() const { return timeout_; }

    using WorkPtr = c10::intrusive_ptr<c10d::Work>;

    // ---- reductions ----

    WorkPtr allreduce(std::vector<at::Tensor> &tensors,
                   const c10d::AllreduceOptions &opts = c10d::AllreduceOptions()) override
    {
        const std::string op = "allreduce";
        const at::Tensor &t = check_one(op, tensors);
        tutti_dtype_t dt = reduce_dtype(op, t);
        tutti_op_t rop = op_of(op, opts.reduceOp, t);
        Buf b(t, true);
        auto w = make(c10d::OpType::ALLREDUCE, op, {t});
        w->keep_ = {b.work};
        if (b.copied())
            w->finalize_ = [b] { b.copy_back(); };
        size_t n = static_cast<size_t>(t.numel());
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_allreduce(b.ptr(), b.ptr(), n, dt, rop, comm_, h);
        });
        return w;
    }

    WorkPtr allreduce_coalesced(std::vector<at::Tensor> &tensors,
                             const c10d::AllreduceCoalescedOptions &opts =
                                 c10d::AllreduceCoalescedOptions()) override
    {
        const std::string op = "allreduce_coalesced";
        if (tensors.empty())
            refuse(op, "got no tensors");
        for (const auto &t : tensors) {
            check_tensor(op, t);
            if (t.scalar_type() != tensors[0].scalar_type())
                refuse(op, std::string("all tensors must have one dtype; got ") +
                               c10::toString(tensors[0].scalar_type()) + " and " +
                               c10::toString(t.scalar_type()));
        }
        tutti_dtype_t dt = reduce_dtype(op, tensors[0]);
        tutti_op_t rop = op_of(op, opts.reduceOp, tensors[0]);
        std::vector<Buf> bufs;
        std::vector<void *> ptrs;
        std::vector<size_t> counts;
        auto w = make(c10d::OpType::ALLREDUCE_COALESCED, op, tensors);
        bool any_copied = false;
        for (const auto &t : tensors) {
            bufs.emplace_back(t, true);
            ptrs.push_back(bufs.back().ptr());
            counts.push_back(static_cast<size_t>(t.numel()));
            w->keep_.push_back(bufs.back().work);
            any_copied = any_copied || bufs.back().copied();
        }
        if (any_copied)
            w->finalize_ = [bufs] {
                for (const auto &b : bufs)
                    b.copy_back();
            };
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_allreduce_coalesced(nullptr, ptrs.data(), counts.data(),
                                             static_cast<int>(ptrs.size()), dt, rop, comm_, h);
        });
        return w;
    }

    WorkPtr reduce(std::vector<at::Tensor> &tensors,
                const c10d::ReduceOptions &opts = c10d::ReduceOptions()) override
    {
        const std::string op = "reduce";
        const at::Tensor &t = check_one(op, tensors);
        check_root(op, opts.rootRank);
        if (opts.rootTensor != 0)
            refuse(op, "rootTensor must be 0 (one tensor per call)");
        tutti_dtype_t dt = reduce_dtype(op, t);
        tutti_op_t rop = op_of(op, opts.reduceOp, t);
        Buf b(t, true);
        auto w = make(c10d::OpType::REDUCE, op, {t});
        w->keep_ = {b.work};
        if (b.copied() && opts.rootRank == rank_)
            w->finalize_ = [b] { b.copy_back(); };
        size_t n = static_cast<size_t>(t.numel());
        int root = static_cast<int>(opts.rootRank);
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_reduce(b.ptr(), b.ptr(), n, dt, rop, root, comm_, h);
        });
        return w;
    }

    WorkPtr reduce_scatter(std::vector<at::Tensor> &outputs,
                        std::vector<std::vector<at::Tensor>> &inputs,
                        const c10d::ReduceScatterOptions &opts =
                            c10d::ReduceScatterOptions()) override
    {
        const std::string op = "reduce_scatter";
        const at::Tensor &out = check_one(op, outputs);
        if (inputs.size() != 1)
            refuse(op, "takes one input list per call, got " + std::to_string(inputs.size()));
        const auto &in = inputs[0];
        check_list(op, "input", in, out);
        tutti_dtype_t dt = reduce_dtype(op, out);
        tutti_op_t rop = op_of(op, opts.reduceOp, out);
        auto w = make(c10d::OpType::REDUCE_SCATTER, op, {out});
        const void *send;
        if (adjacent(in)) {
            send = in[0].data_ptr();
            w->keep_ = in;
        } else {
            at::Tensor flat = byte_buffer(nbytes(out) * in.size());
            uint8_t *p = flat.data_ptr<uint8_t>();
            for (const auto &t : in)
                bytes_out(t, p), p += nbytes(t);
            send = flat.data_ptr();
            w->keep_ = {flat};
        }
        Buf b(out, false);
        w->keep_.push_back(b.work);
        if (b.copied())
            w->finalize_ = [b] { b.copy_back(); };
        size_t n = static_cast<size_t>(out.numel());
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_reduce_scatter(send, b.ptr(), n, dt, rop, comm_, h);
        });
        return w;
    }

    WorkPtr _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                              const c10d::ReduceScatterOptions &opts =
                                  c10d::ReduceScatterOptions()) override
    {
        const std::string op = "_reduce_scatter_base";
        check_tensor(op, output);
        check_tensor(op, input);
        check_same_dtype(op, input, output);
        if (input.numel() != output.numel() * size_)
            refuse(op, "the input must hold world size (" + std::to_string(size_) +
                           ") times the output's elements: input " +
                           std::to_string(input.numel()) + ", output " +
                           std::to_string(output.numel()));
        tutti_dtype_t dt = reduce_dtype(op, output);
        tutti_op_t rop = op_of(op, opts.reduceOp, output);
        Buf bi(input, true), bo(output, false);
        auto w = make(c10d::OpType::_REDUCE_SCATTER_BASE, op, {output});
        w->keep_ = {bi.work, bo.work};
        if (bo.copied())
            w->finalize_ = [bo] { bo.copy_back(); };
        size_t n = static_cast<size_t>(output.numel());
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_reduce_scatter(bi.ptr(), bo.ptr(), n, dt, rop, comm_, h);
        });
        return w;
    }

    // ---- data movement (bytes: every dtype) ----

    WorkPtr broadcast(std::vector<at::Tensor> &tensors,
                   const c10d::BroadcastOptions &opts = c10d::BroadcastOptions()) override
    {
        const std::string op = "broadcast";
        const at::Tensor &t = check_one(op, tensors);
        check_root(op, opts.rootRank);
        if (opts.rootTensor != 0)
            refuse(op, "rootTensor must be 0 (one tensor per call)");
        bool root = opts.rootRank == rank_;
        Buf b(t, root);
        auto w = make(c10d::OpType::BROADCAST, op, {t});
        w->keep_ = {b.work};
        if (b.copied() && !root)
            w->finalize_ = [b] { b.copy_back(); };
        size_t n = nbytes(t);
        int r = static_cast<int>(opts.rootRank);
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_broadcast(b.ptr(), n, TUTTI_UINT8, r, comm_, h);
        });
        return w;
    }

    WorkPtr allgather(std::vector<std::vector<at::Tensor>> &outputs,
                   std::vector<at::Tensor> &inputs,
                   const c10d::AllgatherOptions & = c10d::AllgatherOptions()) override
    {
        const std::string op = "allgather";
        const at::Tensor &in = check_one(op, inputs);
        if (outputs.size() != 1)
            refuse(op, "takes one output list per call, got " + std::to_string(outputs.size()));
        auto &outs = outputs[0];
        check_list(op, "output", outs, in);
        auto w = make(c10d::OpType::ALLGATHER, op, outs);
        at::Tensor src = in.contiguous();
        size_t nb = nbytes(in);
        void *recv;
        if (adjacent(outs)) {
            recv = outs[0].data_ptr();
            w->keep_ = {src};
        } else {
            at::Tensor flat = byte_buffer(nb * outs.size());
            recv = flat.data_ptr();
            w->keep_ = {src, flat};
            w->finalize_ = [outs, flat, nb] {
                const uint8_t *p = flat.data_ptr<uint8_t>();
                for (const auto &o : outs)
                    bytes_in(o, p), p += nb;
            };
        }
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_allgather(src.data_ptr(), recv, nb, TUTTI_UINT8, comm_, h);
        });
        return w;
    }

    WorkPtr _allgather_base(at::Tensor &output, at::Tensor &input,
                         const c10d::AllgatherOptions & = c10d::AllgatherOptions()) override
    {
        const std::string op = "_allgather_base";
        check_tensor(op, output);
        check_tensor(op, input);
        check_same_dtype(op, input, output);
        if (output.numel() != input.numel() * size_)
            refuse(op, "the output must hold world size (" + std::to_string(size_) +
                           ") times the input's elements: input " +
                           std::to_string(input.numel()) + ", output " +
                           std::to_string(output.numel()));
        Buf bi(input, true), bo(output, false);
        auto w = make(c10d::OpType::_ALLGATHER_BASE, op, {output});
        w->keep_ = {bi.work, bo.work};
        if (bo.copied())
            w->finalize_ = [bo] { bo.copy_back(); };
        size_t nb = nbytes(input);
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_allgather(bi.ptr(), bo.ptr(), nb, TUTTI_UINT8, comm_, h);
        });
        return w;
    }

    // output_lists[r][i] = rank r's inputs[i]: every rank's inputs are packed into one block and
    // gathered in one allgather.
    WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>> &output_lists,
                             std::vector<at::Tensor> &inputs,
                             const c10d::AllgatherOptions & = c10d::AllgatherOptions()) override
    {
        const std::string op = "allgather_coalesced";
        if (inputs.empty())
            refuse(op, "got no input tensors");
        if (output_lists.size() != static_cast<size_t>(size_))
            refuse(op, "needs one output list per rank (" + std::to_string(size_) + "), got " +
                           std::to_string(output_lists.size()));
        size_t total = 0;
        for (const auto &t : inputs) {
            check_tensor(op, t);
            total += nbytes(t);
        }
        std::vector<at::Tensor> flat_outs;
        for (const auto &list : output_lists) {
            if (list.size() != inputs.size())
                refuse(op, "every output list must have as many tensors as the inputs (" +
                               std::to_string(inputs.size()) + "), got " +
                               std::to_string(list.size()));
            for (size_t i = 0; i < list.size(); i++) {
                check_tensor(op, list[i]);
                check_same_dtype(op, inputs[i], list[i]);
                if (list[i].numel() != inputs[i].numel())
                    refuse(op, "output tensor " + std::to_string(i) + " has " +
                                   std::to_string(list[i].numel()) + " elements, its input " +
                                   std::to_string(inputs[i].numel()));
                flat_outs.push_back(list[i]);
            }
        }
        auto w = make(c10d::OpType::ALLGATHER_COALESCED, op, flat_outs);
        at::Tensor send = byte_buffer(total), recv = byte_buffer(total * size_);
        uint8_t *p = send.data_ptr<uint8_t>();
        for (const auto &t : inputs)
            bytes_out(t, p), p += nbytes(t);
        w->keep_ = {send, recv};
        w->finalize_ = [flat_outs, recv] {
            const uint8_t *q = recv.data_ptr<uint8_t>();
            for (const auto &o : flat_outs)
                bytes_in(o, q), q += nbytes(o);
        };
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_allgather(send.data_ptr(), recv.data_ptr(), total, TUTTI_UINT8, comm_, h);
        });
        return w;
    }

    // Rows (dim 0) of input go to the ranks by inputSplitSizes (equal parts when empty); rows
    // from each rank land in output by outputSplitSizes.
    WorkPtr alltoall_base(at::Tensor &output, at::Tensor &input,
                       std::vector<int64_t> &outputSplitSizes,
                       std::vector<int64_t> &inputSplitSizes,
                       const c10d::AllToAllOptions & = c10d::AllToAllOptions()) override
    {
        const std::string op = "alltoall_base";
        check_tensor(op, output);
        check_tensor(op, input);
        check_same_dtype(op, input, output);
        Buf bi(input, true), bo(output, false);
        auto w = make(c10d::OpType::ALLTOALL_BASE, op, {output});
        w->keep_ = {bi.work, bo.work};
        if (bo.copied())
            w->finalize_ = [bo] { bo.copy_back(); };
        if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
            if (input.numel() != output.numel() || input.numel() % size_ != 0)
                refuse(op, "without split sizes, input and output need the same number of "
                           "elements, divisible by the world size " + std::to_string(size_) +
                               ": input " + std::to_string(input.numel()) + ", output " +
                               std::to_string(output.numel()));
            size_t nb = nbytes(input) / static_cast<size_t>(size_);
            w->post(comm_, [&](tutti_work_t **h) {
                return tutti_alltoall(bi.ptr(), bo.ptr(), nb, TUTTI_UINT8, comm_, h);
            });
            return w;
        }
        auto sc = split_bytes(op, "input", input, inputSplitSizes);
        auto rc = split_bytes(op, "output", output, outputSplitSizes);
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_alltoallv(bi.ptr(), sc.data(), nullptr, bo.ptr(), rc.data(), nullptr,
                                   TUTTI_UINT8, comm_, h);
        });
        return w;
    }

    // inputs[j] goes to rank j, outputs[j] comes from rank j; sizes may differ per peer.
    WorkPtr alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
                  const c10d::AllToAllOptions & = c10d::AllToAllOptions()) override
    {
        const std::string op = "alltoall";
        if (inputs.size() != static_cast<size_t>(size_) ||
            outputs.size() != static_cast<size_t>(size_))
            refuse(op, "needs one input and one output tensor per rank (" +
                           std::to_string(size_) + "), got " + std::to_string(inputs.size()) +
                           " and " + std::to_string(outputs.size()));
        std::vector<size_t> sc, rc;
        size_t stotal = 0, rtotal = 0;
        for (int j = 0; j < size_; j++) {
            check_tensor(op, inputs[j]);
            check_tensor(op, outputs[j]);
            check_same_dtype(op, inputs[j], outputs[j]);
            sc.push_back(nbytes(inputs[j]));
            rc.push_back(nbytes(outputs[j]));
            stotal += sc.back();
            rtotal += rc.back();
        }
        auto w = make(c10d::OpType::ALLTOALL, op, outputs);
        at::Tensor send = byte_buffer(stotal), recv = byte_buffer(rtotal);
        uint8_t *p = send.data_ptr<uint8_t>();
        for (const auto &t : inputs)
            bytes_out(t, p), p += nbytes(t);
        w->keep_ = {send, recv};
        std::vector<at::Tensor> outs = outputs;
        w->finalize_ = [outs, recv] {
            const uint8_t *q = recv.data_ptr<uint8_t>();
            for (const auto &o : outs)
                bytes_in(o, q), q += nbytes(o);
        };
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_alltoallv(send.data_ptr(), sc.data(), nullptr, recv.data_ptr(),
                                   rc.data(), nullptr, TUTTI_UINT8, comm_, h);
        });
        return w;
    }

    // gather and scatter are alltoallv with every count zero except those to or from the root:
    // one ordered collective, so they mix safely with the others.
    WorkPtr gather(std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
                const c10d::GatherOptions &opts = c10d::GatherOptions()) override
    {
        const std::string op = "gather";
        const at::Tensor &in = check_one(op, inputs);
        check_root(op, opts.rootRank);
        int root = static_cast<int>(opts.rootRank);
        bool is_root = root == rank_;
        std::vector<at::Tensor> outs;
        if (is_root) {
            if (outputs.size() != 1)
                refuse(op, "the root takes one output list, got " +
                               std::to_string(outputs.size()));
            outs = outputs[0];
            check_list(op, "output", outs, in);
        } else if (!outputs.empty() && !(outputs.size() == 1 && outputs[0].empty())) {
            refuse(op, "only the root (rank " + std::to_string(root) +
                           ") passes output tensors; this is rank " + std::to_string(rank_));
        }
        size_t nb = nbytes(in);
        std::vector<size_t> sc(size_, 0), rc(size_, 0);
        sc[root] = nb;
        if (is_root)
            std::fill(rc.begin(), rc.end(), nb);
        auto w = make(c10d::OpType::GATHER, op, outs);
        at::Tensor src = in.contiguous();
        at::Tensor recv = byte_buffer(is_root ? nb * size_ : 0);
        w->keep_ = {src, recv};
        if (is_root)
            w->finalize_ = [outs, recv, nb] {
                const uint8_t *q = recv.data_ptr<uint8_t>();
                for (const auto &o : outs)
                    bytes_in(o, q), q += nb;
            };
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_alltoallv(src.data_ptr(), sc.data(), nullptr, recv.data_ptr(), rc.data(),
                                   nullptr, TUTTI_UINT8, comm_, h);
        });
        return w;
    }

    WorkPtr scatter(std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
                 const c10d::ScatterOptions &opts = c10d::ScatterOptions()) override
    {
        const std::string op = "scatter";
        const at::Tensor &out = check_one(op, outputs);
        check_root(op, opts.rootRank);
        int root = static_cast<int>(opts.rootRank);
        bool is_root = root == rank_;
        size_t nb = nbytes(out);
        at::Tensor send;
        if (is_root) {
            if (inputs.size() != 1)
                refuse(op, "the root takes one input list, got " + std::to_string(inputs.size()));
            check_list(op, "input", inputs[0], out);
            send = byte_buffer(nb * size_);
            uint8_t *p = send.data_ptr<uint8_t>();
            for (const auto &t : inputs[0])
                bytes_out(t, p), p += nb;
        } else {
            if (!inputs.empty() && !(inputs.size() == 1 && inputs[0].empty()))
                refuse(op, "only the root (rank " + std::to_string(root) +
                               ") passes input tensors; this is rank " + std::to_string(rank_));
            send = byte_buffer(0);
        }
        std::vector<size_t> sc(size_, 0), rc(size_, 0);
        if (is_root)
            std::fill(sc.begin(), sc.end(), nb);
        rc[root] = nb;
        Buf b(out, false);
        auto w = make(c10d::OpType::SCATTER, op, {out});
        w->keep_ = {send, b.work};
        if (b.copied())
            w->finalize_ = [b] { b.copy_back(); };
        w->post(comm_, [&](tutti_work_t **h) {
            return tutti_alltoallv(send.data_ptr(), sc.data(), nullptr, b.ptr(), rc.data(),
                                   nullptr, TUTTI_UINT8, comm_, h);
        });
        return w;
    }

    WorkPtr barrier(const c10d::BarrierOptions & = c10d::BarrierOptions()) override
    {
        auto w = make(c10d::OpType::BARRIER, "barrier", {});
        w->post(comm_, [&](tutti_work_t **h) { return tutti_barrier(comm_, h); });
        return w;
    }

    // Point to point: tutti matches the n-th send to a peer with that peer's n-th recv from this
    // rank; the tag must agree and lie in 0..1023.
    WorkPtr send(std::vector<at::Tensor> &tensors, int dst, int tag) override
    {
        const std::string op = "send";
        const at::Tensor &t = check_one(op, tensors);
        at::Tensor src = t.contiguous();
        auto w = make(c10d::OpType::SEND, op, {t});
        w->keep_ = {src};
        size_t nb = nbytes(t);
        tutti_comm_t *c = p2p(op, rank_, dst);
        w->post(c, [&](tutti_work_t **h) {
            return tutti_send(src.data_ptr(), nb, TUTTI_UINT8, dst, tag, c, h);
        });
        return w;
    }

    WorkPtr recv(std::vector<at::Tensor> &tensors, int src, int tag) override
    {
        const std::string op = "recv";
        const at::Tensor &t = check_one(op, tensors);
        Buf b(t, false);
        auto w = make(c10d::OpType::RECV, op, {t});
        w->keep_ = {b.work};
        if (b.copied())
            w->finalize_ = [b] { b.copy_back(); };
        size_t nb = nbytes(t);
        tutti_comm_t *c = p2p(op, src, rank_);
        w->post(c, [&](tutti_work_t **h) {
            return tutti_recv(b.ptr(), nb, TUTTI_UINT8, src, tag, c, h);
        });
        return w;
    }

    WorkPtr recvAnysource(std::vector<at::Tensor> &, int) override
    {
        refuse("recv", "receiving from any source is not supported: tutti matches messages per "
                       "peer; name the source rank");
    }

  private:
    // Each tutti_comm_destroy waits (up to the timeout) for the live peers to destroy theirs
    // too, and returns at once on a failed communicator.
    void destroy()
    {
        for (tutti_comm_t **c : {&down_, &up_, &comm_}) {
            if (*c != nullptr)
                tutti_comm_destroy(*c);
            *c = nullptr;
        }
    }

    // The point-to-point communicator for a message from rank `from` to rank `to`.
    tutti_comm_t *p2p(const std::string &op, int from, int to) const
    {
        int peer = from == rank_ ? to : from;
        if (peer < 0 || peer >= size_)
            refuse(op, "peer rank " + std::to_string(peer) + " is out of range 0.." +
                           std::to_string(size_ - 1));
        if (peer == rank_)
            refuse(op, "peer " + std::to_string(peer) + " is this rank; tutti does not send to "
                       "itself (copy the tensor instead)");
        return from < to ? up_ : down_;
    }

    c10::intrusive_ptr<TuttiWork> make(c10d::OpType type, const std::string &name,
                                       std::vector<at::Tensor> outputs)
    {
        if (comm_ == nullptr)
            refuse(name, "the process group was shut down");
        tracker_->drain();
        return c10::make_intrusive<TuttiWork>(rank_, type, name, std::move(outputs), tracker_);
    }

    void check_root(const std::string &op, int64_t root) const
    {
        if (root < 0 || root >= size_)
            refuse(op, "root rank " + std::to_string(root) + " is out of range 0.." +
                           std::to_string(size_ - 1));
    }

    static void check_same_dtype(const std::string &op, const at::Tensor &a, const at::Tensor &b)
    {
        if (a.scalar_type() != b.scalar_type())
            refuse(op, std::string("input and output dtypes differ: ") +
                           c10::toString(a.scalar_type()) + " and " +
                           c10::toString(b.scalar_type()));
    }

    // check_list: one tensor per rank, each of like's dtype and element count.
    void check_list(const std::string &op, const char *what, const std::vector<at::Tensor> &ts,
                    const at::Tensor &like) const
    {
        if (ts.size() != static_cast<size_t>(size_))
            refuse(op, std::string("needs one ") + what + " tensor per rank (" +
                           std::to_string(size_) + "), got " + std::to_string(ts.size()));
        for (const auto &t : ts) {
            check_tensor(op, t);
            check_same_dtype(op, like, t);
            if (t.numel() != like.numel())
                refuse(op, std::string("every ") + what + " tensor must have " +
                               std::to_string(like.numel()) + " elements, got one with " +
                               std::to_string(t.numel()));
        }
    }

    // split_bytes turns split sizes (rows of dim 0 per rank) into byte counts per rank.
    std::vector<size_t> split_bytes(const std::string &op, const char *what, const at::Tensor &t,
                                    const std::vector<int64_t> &splits) const
    {
        int64_t rows = t.dim() > 0 ? t.size(0) : 1;
        size_t row_bytes = rows > 0 ? nbytes(t) / static_cast<size_t>(rows) : 0;
        std::vector<size_t> out(size_);
        if (splits.empty()) {
            if (rows % size_ != 0)
                refuse(op, std::string("the ") + what + "'s " + std::to_string(rows) +
                               " rows do not split equally over " + std::to_string(size_) +
                               " ranks; pass split sizes");
            std::fill(out.begin(), out.end(), row_bytes * static_cast<size_t>(rows / size_));
            return out;
        }
        if (splits.size() != static_cast<size_t>(size_))
            refuse(op, std::string(what) + " split sizes need one entry per rank (" +
                           std::to_string(size_) + "), got " + std::to_string(splits.size()));
        int64_t sum = 0;
        for (int j = 0; j < size_; j++) {
            if (splits[j] < 0)
                refuse(op, std::string(what) + " split size " + std::to_string(splits[j]) +
                               " is negative");
            sum += splits[j];
            out[j] = row_bytes * static_cast<size_t>(splits[j]);
        }
        if (sum != rows)
            refuse(op, std::string(what) + " split sizes add up to " + std::to_string(sum) +
                           " rows, but the tensor has " + std::to_string(rows));
        return out;
    }

    std::shared_ptr<Tracker> tracker_ = std::make_shared<Tracker>();
    tutti_comm_t *comm_ = nullptr; // the collectives
    tutti_comm_t *up_ = nullptr;   // point-to-point from lower to higher ranks
    tutti_comm_t *down_ = nullptr; // point-to-point from higher to lower ranks
    std::chrono::milliseconds timeout_;
};

} // namespace tutti_torch

PYBIND11_MODULE(_C, m)
{
    namespace py = pybind11;
    using tutti_torch::ProcessGroupTutti;
    m.doc() = "tutti's c10d ProcessGroup for torch.distributed (see tutti_torch)";
    // The base types (ProcessGroup, Store) are torch's; import them so pybind11 knows them.
    py::module::import("torch.distributed");
    py::class_<ProcessGroupTutti, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupTutti>>(
        m, "ProcessGroupTutti",
        "A c10d ProcessGroup whose collectives run on tutti. Made by "
        "torch.distributed.init_process_group('tutti') / new_group once tutti_torch is imported.")
        .def(py::init([](const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                         std::chrono::milliseconds timeout) {
                 return c10::make_intrusive<ProcessGroupTutti>(store, rank, size, timeout);
             }),
             py::arg("store"), py::arg("rank"), py::arg("size"),
             py::arg("timeout") = std::chrono::milliseconds(300000),
             py::call_guard<py::gil_scoped_release>())
        .def_property_readonly(
            "transport",
            [](const ProcessGroupTutti &pg) {
                std::vector<std::string> out;
                for (int p = 0; p < pg.getSize(); p++) {
                    const char *t = tutti_comm_transport(pg.comm(), p);
                    out.emplace_back(t ? t : "?");
                }
                return out;
            },
            "the transport tutti uses towards each rank (\"self\", \"shm\", \"ofi\")")
        .def_property_readonly(
            "timeout", [](const ProcessGroupTutti &pg) { return pg.timeout(); },
            "the timeout of every operation (init_process_group's timeout)")
        .def_property_readonly(
            "node_count",
            [](const ProcessGroupTutti &pg) { return tutti_comm_node_count(pg.comm()); },
            "the number of nodes the group spans");
    m.def("version", [] { return std::string(tutti_version()); }, "tutti's library version");
}
